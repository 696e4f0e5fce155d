//go:build cgo && amd64

package namespaces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
)

// v1Cgroup creates a cgroup v1 cgroup for the test (root, every
// hierarchy tent uses mounted) and removes it when the test ends.
func v1Cgroup(t *testing.T) *cgroups.Cgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("creating cgroup v1 cgroups needs root here (euid %d)", os.Geteuid())
	}
	h, err := cgroups.Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		if h.V1Mounts[c] == "" {
			t.Skipf("cgroup v1 %s controller is not mounted (host mode %s)", c, h.Mode)
		}
	}
	cg, err := cgroups.Create(h, fmt.Sprintf("tent-clonetest-%d", os.Getpid()), cgroups.Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cg.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return cg
}

// sandboxCloneFlags are Start's namespaces for an init.
const sandboxCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET

// cloneCat clones `cat /proc/self/cgroup` into an init's namespaces (as
// root: 0 mapped to 0) with cgroupFD and tasks as cloneShared's cgroup v2
// directory and v1 files, and returns what it printed and whether it was
// cloned into the v2 directory.
func cloneCat(t *testing.T, cgroupFD int, tasks []int) (string, bool, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	id := syscall.SysProcIDMap{ContainerID: 0, HostID: 0, Size: 1}
	pid, into, err := cloneShared("/bin/cat", []string{"cat", "/proc/self/cgroup"}, []string{},
		[4]int{int(null.Fd()), int(w.Fd()), int(null.Fd()), int(null.Fd())}, sandboxCloneFlags, cgroupFD, tasks,
		false, 0, 0, func(pid int) error { return writeIDMaps(pid, id, id, true) })
	w.Close()
	if err != nil {
		return "", false, err
	}
	out, rerr := io.ReadAll(r)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	if rerr != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("cat /proc/self/cgroup: %v, status %v", rerr, ws)
	}
	return string(out), into, nil
}

// The shared-memory clone joins the cgroup v1 hierarchies whose tasks
// files it is given before it execs: what it execs lists the cgroup's
// directory in every hierarchy as its own, and nothing but the child
// wrote to those files. Without them it stays in the caller's cgroups.
// A descriptor it cannot write to fails the start, naming the step.
func TestCloneSharedJoinsCgroupV1(t *testing.T) {
	cg := v1Cgroup(t)
	name := fmt.Sprintf("/tent-clonetest-%d\n", os.Getpid())

	out, _, err := cloneCat(t, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, name) {
		t.Fatalf("without tasks files the child is in the test's cgroup:\n%s", out)
	}

	tasks, err := cg.OpenSelfJoin()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(tasks)
	out, _, err = cloneCat(t, -1, tasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && strings.Contains(","+f[1]+",", ","+c+",") {
				found = strings.HasSuffix(f[2]+"\n", name)
			}
		}
		if !found {
			t.Errorf("the child is not in the cgroup's %s hierarchy:\n%s", c, out)
		}
	}

	ro, err := unix.Open("/proc/self/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	if _, _, err := cloneCat(t, -1, []int{ro}); !errors.Is(err, unix.EBADF) || !strings.Contains(err.Error(), "joining its cgroup v1 hierarchies") {
		t.Errorf("a read-only tasks descriptor: %v, want EBADF while joining its cgroup v1 hierarchies", err)
	}
}

// The shared-memory clone with a cgroup v2 directory starts the child in
// it (clone3 CLONE_INTO_CGROUP: no write to cgroup.procs, so not the
// kernel's global lock): what it execs lists that directory as its v2
// cgroup. Needs root and a writable cgroup2 mount: the unified hierarchy
// of a hybrid host, or a pure v2 host's tree.
func TestCloneSharedIntoCgroupV2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("creating a cgroup v2 directory needs root here (euid %d)", os.Geteuid())
	}
	h, err := cgroups.Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if h.V2Root == "" {
		t.Skip("no cgroup2 hierarchy mounted")
	}
	own := h.Self[""]
	name := fmt.Sprintf("tent-clonetest-v2-%d", os.Getpid())
	dir := filepath.Join(h.V2Root, own, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup v2 directory here: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out, into, err := cloneCat(t, fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !into {
		t.Errorf("not cloned into the cgroup (clone3 CLONE_INTO_CGROUP needs Linux 5.7; this is %s)", kernelRelease(t))
	}
	if !strings.Contains(out, "0::"+filepath.Join(own, name)+"\n") {
		t.Errorf("the child is not in %s:\n%s", dir, out)
	}
}

func kernelRelease(t *testing.T) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}
