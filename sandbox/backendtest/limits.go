package backendtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// setLimits: a running sandbox's memory and pids limits change live (its
// cgroup's files and its Info say the new ones); a limit fixed at
// provision time (Timeout) is ErrUnsupported, a negative one
// ErrInvalidSpec; a sandbox without a cgroup refuses (fails closed).
func setLimits(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	spec := sandbox.Spec{Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64}}
	s, err := b.Provision(ctx, spec)
	if errors.Is(err, sandbox.ErrUnsupported) {
		// A host with no cgroup for this caller refuses the limits
		// (fails closed); a sandbox without them refuses to get some.
		s = provision(t, b, sandbox.Spec{})
	} else if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	h := on(t, b, s.ID)
	if len(s.CgroupPaths) == 0 {
		if err := h.SetLimits(ctx, sandbox.Limits{Memory: 512 << 20}); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("SetLimits without a cgroup: %v, want ErrUnsupported", err)
		}
		return
	}
	if err := h.SetLimits(ctx, sandbox.Limits{Memory: 512 << 20, Pids: 128}); err != nil {
		t.Fatal(err)
	}
	info, err := get(ctx, b, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l := info.Spec.Limits; l.Memory != 512<<20 || l.Pids != 128 {
		t.Errorf("Info's limits after SetLimits: %+v, want memory 512 MiB, pids 128", l)
	}
	for name, want := range map[string]string{"memory.max": "536870912", "memory.limit_in_bytes": "536870912", "commands/pids.max": "128"} {
		for _, dir := range info.CgroupPaths {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err == nil && strings.TrimSpace(string(got)) != want {
				t.Errorf("%s/%s = %q, want %s", dir, name, strings.TrimSpace(string(got)), want)
			}
		}
	}
	if err := h.SetLimits(ctx, sandbox.Limits{Timeout: time.Minute}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("SetLimits of the timeout: %v, want ErrUnsupported", err)
	}
	if err := h.SetLimits(ctx, sandbox.Limits{Memory: -1}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("SetLimits of a negative memory limit: %v, want ErrInvalidSpec", err)
	}
	if got := out(t, b, s.ID, "echo", "alive"); got != "alive" {
		t.Errorf("after SetLimits: %q", got)
	}
}
