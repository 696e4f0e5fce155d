//go:build linux

package supervised

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// zombieChildren lists this process's children that have ended and not
// been reaped.
func zombieChildren(t *testing.T) []string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so from its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) > 1 && string(f[0]) == "Z" && string(f[1]) == me {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// TestTerminatedSupervisorsAreReaped: a long-lived embedder (tent serve)
// that provisions and terminates sandboxes keeps no zombie of their
// supervisors, which are its children (found by review: each killed
// sandbox of tent serve left one, holding a pid, until the server ended).
func TestTerminatedSupervisorsAreReaped(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	for i := range 3 {
		info := provision(t, b, sandbox.Spec{Name: fmt.Sprintf("reaped-%d", i)})
		if err := sbOf(t, b, info.ID).Terminate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var z []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if z = zombieChildren(t); len(z) == 0 {
			return
		}
	}
	t.Fatalf("zombie children after Terminate: %v", z)
}
