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

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/sandbox"
)

// A sandbox's start removes the empty tent-* cgroups beside its own that
// a killed owner left (older than 30 s), with their pids limit's child,
// and leaves a fresh one alone.
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
		// Each with the child a pids limit makes (cgroups.CommandsName).
		for _, d := range []string{s, f, filepath.Join(s, cgroups.CommandsName), filepath.Join(f, cgroups.CommandsName)} {
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
	// A live sandbox, aged too, whose pids limit's child is empty (no
	// exec yet): another start leaves it whole.
	live := provision(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 16}})
	for _, p := range live.Info().CgroupPaths {
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, sandbox.Spec{}, "true")
	if out, err := live.Command(context.Background(), "echo", "alive").Output(); err != nil || string(out) != "alive\n" {
		t.Errorf("the live sandbox after another start reaped stale cgroups: %q, %v", out, err)
	}
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
