package cgroups

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// createV2Core creates a v2 cgroup with no limits, which needs no
// controller: on a hybrid host this exercises the v2 code paths
// (CLONE_INTO_CGROUP, cgroup.procs, cgroup.freeze, cgroup.kill) on the
// controller-less cgroup2 mount. It skips where that would change the
// host beyond the test's own cgroup (enabling controllers in this
// process's cgroup, or moving this process).
func createV2Core(t *testing.T) *Cgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("creating a cgroup v2 cgroup outside a delegated subtree needs root (euid %d)", os.Geteuid())
	}
	h, err := Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if h.V2Root == "" {
		t.Skipf("no cgroup2 mount (host mode %s)", h.Mode)
	}
	parent, err := v2Parent(h)
	if err != nil {
		t.Skipf("own v2 cgroup unusable: %v", err)
	}
	subtree, err := readFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := planV2(h, testName(), Limits{}, strings.Fields(subtree))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Enable) > 0 {
		t.Skipf("would enable controllers %q in %s, changing the host", p.Enable, parent)
	}
	c, err := applyV2(p)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	for _, f := range []string{"cgroup.kill", "cgroup.freeze"} {
		if !fileExists(filepath.Join(p.Dir, f)) {
			t.Skipf("%s absent (cgroup.freeze needs Linux 5.2, cgroup.kill 5.14)", f)
		}
	}
	return c
}

func TestV2CoreLifecycle(t *testing.T) {
	c := createV2Core(t)
	ctx := ctxT(t)
	dir := c.Paths()[0]
	if c.Version() != V2 || len(c.Paths()) != 1 {
		t.Fatalf("Version %v, Paths %q", c.Version(), c.Paths())
	}
	fd, ok := c.FD()
	if !ok || fd < 0 {
		t.Fatalf("FD = %d, %v; want a descriptor on v2", fd, ok)
	}

	// Started inside the cgroup by clone3(CLONE_INTO_CGROUP).
	a := startSleep(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
	// Moved in after start.
	b := startSleep(t, nil)
	if err := c.AddProc(b.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs := procsOf(t, dir)
	for _, cmd := range []*os.Process{a.Process, b.Process} {
		if !slices.Contains(procs, cmd.Pid) {
			t.Errorf("cgroup.procs = %v, want %d in it", procs, cmd.Pid)
		}
	}
	if line := selfCgroupLine(t, a.Process.Pid, ""); filepath.Base(line) != filepath.Base(dir) {
		t.Errorf("/proc/%d/cgroup v2 line %q, want the sandbox cgroup", a.Process.Pid, line)
	}

	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := readKeyed(filepath.Join(dir, "cgroup.events"), "frozen"); err != nil || n != 1 {
		t.Errorf("cgroup.events frozen = %d, %v after Freeze", n, err)
	}
	if err := c.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := readKeyed(filepath.Join(dir, "cgroup.events"), "frozen"); err != nil || n != 0 {
		t.Errorf("cgroup.events frozen = %d, %v after Thaw", n, err)
	}

	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, a)
	waitKilled(t, b)
	if got := procsOf(t, dir); len(got) != 0 {
		t.Errorf("cgroup.procs = %v after Kill", got)
	}

	if err := os.Mkdir(filepath.Join(dir, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if fileExists(dir) {
		t.Errorf("%s exists after Destroy", dir)
	}
	if fd, ok := c.FD(); ok || fd != -1 {
		t.Errorf("FD after Destroy = %d, %v", fd, ok)
	}
}

// TestV2KillLoop exercises Kill's fallback for kernels before 5.14 (no
// cgroup.kill): freeze, SIGKILL each process, thaw.
func TestV2KillLoop(t *testing.T) {
	c := createV2Core(t)
	ctx := ctxT(t)
	fd, _ := c.FD()
	a := startSleep(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
	b := startSleep(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Setsid: true})
	if err := c.killLoop(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, a)
	waitKilled(t, b)
	if n, err := readKeyed(filepath.Join(c.Paths()[0], "cgroup.events"), "frozen"); err != nil || n != 0 {
		t.Errorf("cgroup.events frozen = %d, %v after killLoop, want thawed", n, err)
	}
}
