//go:build linux

package fs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// PlanInput.WritableRoot: the plan says so, Landlock grants every right
// but device ioctls beneath "/", and a caller's root excludes it.
func TestPlanWritableRoot(t *testing.T) {
	in := PlanInput{System: []SystemEntry{{Path: "/usr"}}, Home: "/home/u"}
	p, err := NewPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.WritableRoot || LandlockRules(p)[0] != (LandlockRule{Path: "/", Access: llReadExec}) {
		t.Fatalf("default plan: writable %v, first rule %+v", p.WritableRoot, LandlockRules(p)[0])
	}
	in.WritableRoot = true
	if p, err = NewPlan(in); err != nil {
		t.Fatal(err)
	}
	r := LandlockRules(p)[0]
	if !p.WritableRoot || r.Path != "/" || r.Access&llWriteFile == 0 || r.Access&unix.LANDLOCK_ACCESS_FS_MAKE_DIR == 0 || r.Access&llIoctlDev != 0 {
		t.Errorf("writable root: plan %v, first rule %+v", p.WritableRoot, r)
	}
	in.Root = &Mount{Source: "/srv/rootfs", Target: "/", Access: ReadWrite}
	if _, err := NewPlan(in); !errors.Is(err, ErrInvalidMount) {
		t.Errorf("writable root with a caller's root: %v, want ErrInvalidMount", err)
	}
}

// PlanInput.Private: tent's own tmpfs and symlinks join the plan, its
// unions come last (after every mount they may lie on); other kinds and
// bad targets are refused.
func TestPlanPrivateSteps(t *testing.T) {
	in := PlanInput{System: []SystemEntry{{Path: "/usr"}}, Home: "/home/u", Private: []Step{
		{Kind: KindUnion, Target: "/usr/local/bin", Lowers: []string{"/run/x/bin", "/usr/local/bin"}, Optional: true, FD: -1},
		{Kind: KindTmpfs, Target: "/run/x", Mode: 0o755, FD: -1},
		{Kind: KindSymlink, Target: "/run/x/bin/a", LinkTo: "/run/x/a", FD: -1},
	}}
	p, err := NewPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	last := p.Steps[len(p.Steps)-1]
	if last.Kind != KindUnion || last.Target != "/usr/local/bin" || len(last.Lowers) != 2 {
		t.Errorf("last step %+v, want the union", last)
	}
	var tmpfs, link bool
	for _, s := range p.Steps {
		tmpfs = tmpfs || s.Kind == KindTmpfs && s.Target == "/run/x" && !s.Writable
		link = link || s.Kind == KindSymlink && s.Target == "/run/x/bin/a"
	}
	if !tmpfs || !link {
		t.Errorf("plan lacks tent's own steps: %+v", p.Steps)
	}
	for _, r := range LandlockRules(p) {
		if r.Path == "/run/x" || r.Path == "/usr/local/bin" {
			t.Errorf("Landlock grants %+v on tent's own steps", r)
		}
	}
	for _, bad := range []Step{{Kind: KindBind, Target: "/run/y", Source: "/etc"}, {Kind: KindTmpfs, Target: "/proc/x"}, {Kind: KindTmpfs, Target: "run"}} {
		in.Private = []Step{bad}
		if _, err := NewPlan(in); err == nil {
			t.Errorf("private step %+v accepted", bad)
		}
	}
}
