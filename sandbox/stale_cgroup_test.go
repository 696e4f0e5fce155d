//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A sandbox's start removes the empty tent-* cgroups beside its own that
// a killed owner left (older than 30 s), and leaves a fresh one alone.
func TestStartReapsStaleSiblingCgroups(t *testing.T) {
	if !canLimit(t) {
		t.Skip("no cgroup for sandboxes here")
	}
	sb := provision(t, sandbox.Spec{})
	paths := sb.Info().CgroupPaths
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stale, fresh []string
	for i, p := range paths {
		s := filepath.Join(filepath.Dir(p), fmt.Sprintf("tent-staletest-%d-%d", os.Getpid(), i))
		f := s + "-fresh"
		for _, d := range []string{s, f} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(d) })
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(s, old, old); err != nil {
			t.Skipf("cannot age a cgroup directory here: %v", err)
		}
		stale, fresh = append(stale, s), append(fresh, f)
	}
	mustRun(t, sandbox.Spec{}, "true")
	for _, s := range stale {
		if _, err := os.Stat(s); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale cgroup %s was not removed (%v)", s, err)
		}
	}
	for _, f := range fresh {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("fresh cgroup %s: %v, want it left alone", f, err)
		}
	}
}
