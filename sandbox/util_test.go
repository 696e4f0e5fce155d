package sandbox_test

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func fmtSscan(s string, a ...any) (int, error) { return fmt.Sscan(s, a...) }

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

func sortStrings(s []string) { sort.Strings(s) }
