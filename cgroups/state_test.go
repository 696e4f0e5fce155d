package cgroups

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// A reopened cgroup manages the same directories: its processes are
// killed and its directories removed through it.
func TestReopenV1(t *testing.T) {
	h := requireV1(t)
	c, err := Create(h, testName(), Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	checkReopen(t, c)
}

func TestReopenV2(t *testing.T) {
	checkReopen(t, createV2Core(t))
}

func checkReopen(t *testing.T, c *Cgroup) {
	ctx := ctxT(t)
	cmd := startSleep(t, nil)
	if err := c.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	r, err := Reopen(c.State())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Paths(), " ") != strings.Join(c.Paths(), " ") || r.Version() != c.Version() {
		t.Fatalf("reopened %v %q, created %v %q", r.Version(), r.Paths(), c.Version(), c.Paths())
	}
	if fd, ok := r.FD(); ok || fd != -1 {
		t.Errorf("a reopened cgroup has descriptor %d", fd)
	}
	if err := r.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the process in the cgroup survived Destroy of the reopened cgroup")
	}
	for _, p := range c.Paths() {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

func TestReopenRefusesBadState(t *testing.T) {
	for _, st := range []State{
		{},
		{Version: V2},
		{Version: V2, Dirs: []DirState{{Path: "/a"}, {Path: "/b"}}},
		{Version: V1, Dirs: []DirState{{Path: "relative"}}},
		{Version: V1, Dirs: []DirState{{Path: t.TempDir()}}}, // not a cgroup
	} {
		if _, err := Reopen(st); err == nil {
			t.Errorf("Reopen(%+v) succeeded", st)
		}
	}
}
