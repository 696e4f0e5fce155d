package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A single-threaded process that writes "0" to the descriptors of
// OpenSelfJoin is then in the cgroup in every hierarchy (its
// /proc/PID/cgroup names the cgroup's directory in each), without the
// host writing its pid anywhere; a write of another process's pid
// through the same descriptors would move that process, which is why
// they are close-on-exec and the caller closes them. On v2 and after
// Destroy it is ErrUnsupported.
func TestV1OpenSelfJoin(t *testing.T) {
	h := requireV1(t)
	c, err := Create(h, testName(), Limits{Memory: 64 << 20, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	fds, err := c.OpenSelfJoin()
	if err != nil {
		t.Fatal(err)
	}
	if len(fds) != len(c.Paths()) {
		t.Fatalf("OpenSelfJoin: %d descriptors for %d hierarchies", len(fds), len(c.Paths()))
	}
	files := make([]*os.File, len(fds))
	var script strings.Builder
	for i, fd := range fds {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("descriptor %d: flags %#x (%v), want close-on-exec", fd, flags, err)
		}
		files[i] = os.NewFile(uintptr(fd), "tasks")
		defer files[i].Close()
		// The shell's own write moves the shell (one thread); then it
		// becomes sleep, which stays where it is.
		fmt.Fprintf(&script, "echo 0 >&%d || exit 1; ", 3+i)
	}
	script.WriteString("exec sleep 30")
	cmd := exec.Command("sh", "-c", script.String())
	cmd.ExtraFiles = files
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for _, dir := range c.Paths() {
		for {
			procs, err := readPids(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(procs, pid) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d never joined %s (holds %v)", pid, dir, procs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Every hierarchy the process is in, as the kernel lists it, is the
	// cgroup's directory there (for the hierarchies the cgroup has).
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range c.Paths() {
		if !strings.Contains(string(own), ":"+strings.TrimPrefix(dir, mountOf(h, dir))+"\n") {
			t.Errorf("/proc/%d/cgroup does not name %s:\n%s", pid, dir, own)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := c.Destroy(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if fds, err := c.OpenSelfJoin(); !errors.Is(err, errors.ErrUnsupported) || fds != nil {
		t.Errorf("OpenSelfJoin after Destroy = %v, %v; want ErrUnsupported", fds, err)
	}
}

// mountOf is the v1 mount point dir lies beneath.
func mountOf(h *Host, dir string) string {
	best := ""
	for _, m := range h.V1Mounts {
		if strings.HasPrefix(dir, m+"/") && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// A pids limit is the commands child's: a process that moves itself
// there through OpenCommandsJoin counts against it, the cgroup itself
// allows InitPidsAllowance more, and ReadUsage reports the child's
// count and limit. cgroup v1 here; the VM runs the same on cgroup v2,
// where the child is threaded and the process joins it through
// cgroup.threads.
func TestCommandsChild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root (euid %d)", os.Geteuid())
	}
	h, err := Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Create(h, testName(), Limits{Pids: 4})
	if errors.Is(err, ErrNotDelegated) || errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no pids controller to use here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	join, err := c.OpenCommandsJoin()
	if err != nil || join < 0 {
		t.Fatalf("OpenCommandsJoin: %d, %v", join, err)
	}
	if flags, err := unix.FcntlInt(uintptr(join), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x (%v), want close-on-exec", flags, err)
	}
	files := []*os.File{os.NewFile(uintptr(join), "commands")}
	defer files[0].Close()
	var script strings.Builder
	cmd := exec.Command("sh")
	if fd, ok := c.FD(); ok { // v2: born in the cgroup
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	} else { // v1: into the cgroup in every hierarchy first
		fds, err := c.OpenSelfJoin()
		if err != nil {
			t.Fatal(err)
		}
		for i, fd := range fds {
			f := os.NewFile(uintptr(fd), "tasks")
			defer f.Close()
			files = append(files, f)
			fmt.Fprintf(&script, "echo 0 >&%d || exit 1; ", 4+i)
		}
	}
	script.WriteString(`echo 0 >&3 || exit 1; cat /proc/self/cgroup; i=0; while [ $i -lt 10 ]; do sleep 30 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo forked $i`)
	cmd.Args = []string{"sh", "-c", script.String()}
	cmd.ExtraFiles = files
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "/"+CommandsName+"\n") {
		t.Errorf("the shell is not in the commands child:\n%s", out)
	}
	if strings.Contains(string(out), "forked 10") {
		t.Errorf("10 forks under a limit of 4:\n%s", out)
	}
	dir, _ := c.dirFor("pids")
	if got := readTrim(t, filepath.Join(dir, "pids.max")); got != strconv.Itoa(4+InitPidsAllowance) {
		t.Errorf("the cgroup's pids.max = %s, want the limit and InitPidsAllowance", got)
	}
	if got := readTrim(t, filepath.Join(dir, CommandsName, "pids.max")); got != "4" {
		t.Errorf("the commands child's pids.max = %s, want 4", got)
	}
	if u := ReadUsage(c.Paths()); u.PidsLimit != 4 || u.Pids < 1 || u.Pids > 4 {
		t.Errorf("ReadUsage: %+v, want the commands child's count (1..4) and limit (4)", u)
	}
	if err := c.Kill(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// Destroy's first try removes directories until one is busy: a process
// left in a child cgroup of one hierarchy (the others already removed)
// is still killed, and everything removed, by the retry.
func TestV1DestroyAfterPartialRemoval(t *testing.T) {
	h := requireV1(t)
	ctx := ctxT(t)
	c, err := Create(h, testName(), Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	mem, ok := c.dirFor("memory")
	if !ok {
		t.Skip("no memory hierarchy")
	}
	nested := filepath.Join(mem, "nested")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := startSleep(t, nil)
	if err := writeFile(filepath.Join(nested, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	// memory is the first hierarchy: every other one is empty and goes
	// first, children first.
	if c.Paths()[0] != mem {
		t.Fatalf("hierarchies %q: want memory first", c.Paths())
	}
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, cmd)
	for _, d := range append(c.Paths(), nested) {
		if fileExists(d) {
			t.Errorf("%s exists after Destroy", d)
		}
	}
	// A process in every hierarchy: the freezer's directory is tried
	// first and nothing is removed, so Kill still has the freezer.
	c3, err := Create(h, testName(), Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c3)
	cmd3 := startSleep(t, nil)
	if err := c3.AddProc(cmd3.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if c3.removeEmpty() {
		t.Fatal("removeEmpty removed a cgroup holding a process")
	}
	for _, d := range c3.Paths() {
		if !fileExists(d) {
			t.Errorf("%s removed while the cgroup held a process", d)
		}
	}
	if err := c3.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, cmd3)
	for _, d := range c3.Paths() {
		if fileExists(d) {
			t.Errorf("%s exists after Destroy", d)
		}
	}
	// And the usual end: nothing left, the first try is enough.
	c2, err := Create(h, testName(), Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c2)
	if !c2.removeEmpty() {
		t.Fatal("removeEmpty failed on an empty cgroup")
	}
	for _, d := range c2.Paths() {
		if fileExists(d) {
			t.Errorf("%s exists after removeEmpty", d)
		}
	}
}
