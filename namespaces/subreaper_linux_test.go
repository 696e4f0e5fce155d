package namespaces

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// isSubreaper reads PR_GET_CHILD_SUBREAPER of this process.
func isSubreaper(t *testing.T) bool {
	t.Helper()
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	return v != 0
}

// orphanParent starts a shell that leaves a `sleep 30` orphaned and
// returns the orphan's parent once the shell is gone; the orphan is
// killed (and reaped when it is this process's) when the test ends.
func orphanParent(t *testing.T) int {
	t.Helper()
	sh := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!")
	sh.Dir = t.TempDir()
	out, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
	})
	st, ok := readProcStat(pid)
	if !ok {
		t.Fatalf("the orphan %d is gone", pid)
	}
	return st.ppid
}

// The subreaper is held while anyone holds it: set by the first
// acquisition, cleared by the last release; an orphan reparents to this
// process only meanwhile.
func TestSubreaperRefcount(t *testing.T) {
	if isSubreaper(t) || subreaper.n != 0 {
		t.Fatalf("a subreaper before any acquisition (held %d)", subreaper.n)
	}
	self := os.Getpid()
	AcquireSubreaper()
	if !isSubreaper(t) {
		t.Fatal("not a subreaper after AcquireSubreaper")
	}
	if ppid := orphanParent(t); ppid != self {
		t.Errorf("an orphan's parent is %d while a subreaper, want this process %d", ppid, self)
	}
	AcquireSubreaper()
	ReleaseSubreaper()
	if !isSubreaper(t) || subreaper.n != 1 {
		t.Errorf("subreaper %v, held %d after two acquisitions and one release; want true, 1", isSubreaper(t), subreaper.n)
	}
	ReleaseSubreaper()
	if isSubreaper(t) || subreaper.n != 0 {
		t.Errorf("subreaper %v, held %d after the last release; want false, 0", isSubreaper(t), subreaper.n)
	}
	if ppid := orphanParent(t); ppid == self {
		t.Error("an orphan reparented to this process after the last release")
	}
}

// KillTree kills the command's session and group, a descendant that left
// both while its parent lives, and an orphan that left both (a child of
// the subreaper with no_new_privs, started after the command), and
// leaves this process's other children alone.
func TestKillTree(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setting no_new_privs on the command needs setpriv (util-linux):", err)
	}
	AcquireSubreaper()
	defer ReleaseSubreaper()
	const script = `sleep 30 & echo $!
setsid sleep 30 & echo $!
(setsid sleep 30 & echo $!)
echo ready
wait`
	cmd := exec.Command(setpriv, "--no-new-privs", "sh", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := StartTicks(cmd.Process.Pid)
	var pids []int
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 3 || start == 0 {
		t.Fatalf("descendants %v, start %d", pids, start)
	}
	// Another child of this process, started after the command, without
	// no_new_privs.
	bystander := exec.Command("sleep", "30")
	bystander.Dir = t.TempDir()
	time.Sleep(20 * time.Millisecond) // a start time after the command's, in ticks
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bystander.Process.Kill(); _ = bystander.Wait() }()

	KillTree(cmd.Process.Pid, start)
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the command: %v, want killed by SIGKILL", err)
	}
	for i, pid := range pids {
		if ProcessRuns(pid) {
			t.Errorf("descendant %d (pid %d) still runs", i, pid)
		}
	}
	if !ProcessRuns(bystander.Process.Pid) {
		t.Error("another child of this process was killed")
	}
}
