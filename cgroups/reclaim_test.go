package cgroups

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// checkReclaim puts a sleeping process in c and another in a child
// cgroup of c (in every hierarchy), freezes c, as a supervisor killed
// during a snapshot leaves it, and reclaims c's directories by path: both
// processes die of SIGKILL and every directory is gone.
func checkReclaim(t *testing.T, c *Cgroup) {
	ctx := ctxT(t)
	top := startSleep(t, nil)
	if err := c.AddProc(top.Process.Pid); err != nil {
		t.Fatal(err)
	}
	nested := startSleep(t, nil)
	for _, d := range c.Paths() {
		child := filepath.Join(d, "child")
		if err := os.Mkdir(child, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(child, "cgroup.procs"), strconv.Itoa(nested.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	Reclaim(c.Paths())
	t.Logf("reclaimed in %v", time.Since(start))
	for _, pid := range []int{top.Process.Pid, nested.Process.Pid} {
		if !exited(pid, 5*time.Second) {
			_ = c.Thaw(ctx) // so that the cleanup's kill can end it
			t.Fatalf("process %d survived Reclaim", pid)
		}
	}
	waitKilled(t, top)
	waitKilled(t, nested)
	for _, d := range c.Paths() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Reclaim: %v", d, err)
		}
	}
}

// exited reports whether pid is a zombie or gone within timeout.
func exited(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return true
		}
	}
	return false
}

func TestReclaimV1(t *testing.T) {
	h := requireV1(t)
	c, err := Create(h, testName(), Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	checkReclaim(t, c)
}

func TestReclaimV2(t *testing.T) {
	checkReclaim(t, createV2Core(t))
}

// Directories that are already gone are nothing to wait for.
func TestReclaimGone(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "tent-gone")
	start := time.Now()
	Reclaim([]string{gone, filepath.Join(gone, "child")})
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("Reclaim of missing directories took %v", d)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v", gone, err)
	}
}
