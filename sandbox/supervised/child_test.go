//go:build linux

package supervised

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// parentOf is pid's parent pid (/proc/PID/stat).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	ppid, _ := strconv.Atoi(string(f[1]))
	return ppid
}

// TestLaunchChildExitsWithMainStatus: a child supervisor (tent-runc's
// launch mode) is the caller's child, runs nothing until StartMain, runs
// its main command with its own stdio, and exits with that command's
// status, leaving its record stopped; errors on its socket keep their
// sentinels.
func TestLaunchChildExitsWithMainStatus(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	child, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sh", "-c", "echo started; exit 7"}, Stdout: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := parentOf(t, child.Pid()); got != os.Getpid() {
		t.Errorf("the supervisor's parent is %d, want this process (%d)", got, os.Getpid())
	}
	sb := sbOf(t, b, child.Info.ID)
	if st, err := sb.MainState(ctx); err != nil || st != MainCreated {
		t.Fatalf("MainState before StartMain = %q, %v; want %q", st, err, MainCreated)
	}
	if err := sb.StartMain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.StartMain(ctx); !errors.Is(err, sandbox.ErrInvalidSpec) && !errors.Is(err, sandbox.ErrStopped) {
		t.Errorf("a second StartMain: %v, want ErrInvalidSpec (or ErrStopped, if it ended already)", err)
	}
	code, err := child.Wait()
	if err != nil || code != 7 {
		t.Fatalf("the supervisor exited with %d, %v; want the main command's 7", code, err)
	}
	if out, _ := io.ReadAll(r); string(out) != "started\n" {
		t.Errorf("the main command wrote %q to the supervisor's stdout, want %q", out, "started\n")
	}
	info, err := sb.Info(ctx)
	if err != nil || info.State != sandbox.StateStopped {
		t.Errorf("after the main command: %+v, %v; want its record, stopped", info.State, err)
	}
}

// TestLaunchChildSignalMain: a signal to the main command ends it, and the
// supervisor exits with 128+N; a sandbox that is not a child supervisor's
// has no main command (ErrUnsupported across the socket).
func TestLaunchChildSignalMain(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	child, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := sbOf(t, b, child.Info.ID)
	if err := sb.StartMain(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := sb.MainState(ctx); err != nil || st != MainRunning {
		t.Fatalf("MainState after StartMain = %q, %v; want %q", st, err, MainRunning)
	}
	if err := sb.SignalMain(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := child.Wait(); err != nil || code != 128+int(syscall.SIGTERM) {
		t.Fatalf("the supervisor exited with %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
	}
	// Killed before it started: it never runs, and the supervisor exits
	// with 128+N.
	created, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sbOf(t, b, created.Info.ID).SignalMain(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, err := created.Wait(); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("the supervisor of a main command killed before it started exited with %d, %v; want %d", code, err, 128+int(syscall.SIGKILL))
	}
	if err := sbOf(t, b, child.Info.ID).SignalMain(ctx, syscall.SIGTERM); !errors.Is(err, sandbox.ErrStopped) {
		t.Errorf("SignalMain once the supervisor is gone: %v, want ErrStopped", err)
	}
	other := provision(t, b, sandbox.Spec{})
	if err := sbOf(t, b, other.ID).StartMain(ctx); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("StartMain of an ordinary sandbox: %v, want ErrUnsupported", err)
	}
	if _, err := b.LaunchChild(ctx, ChildLaunch{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("LaunchChild without a command: %v, want ErrInvalidSpec", err)
	}
}

// TestDeepStateDir: a state directory whose sockets' paths exceed a unix
// socket address's 108 bytes (tent-runc's ROOT/ID with CRI's 64-digit
// container ids) still serves: the supervisor binds, and clients dial,
// through a descriptor of the directory.
func TestDeepStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	b, err := Open(dir, Options{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	info := provision(t, b, sandbox.Spec{})
	defer sbOf(t, b, info.ID).Terminate(context.Background())
	if out, _ := execOut(t, b, info.ID, "echo", "deep"); out != "deep\n" {
		t.Errorf("exec in a sandbox of a deep state directory: %q", out)
	}
	if err := sbOf(t, b, info.ID).Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 1 { // snapshots/ may stay
		t.Errorf("left in the state directory: %v", ents)
	}
}

// TestLaunchChildParentReaps: with ParentReaps the sandbox's init is the
// caller's child too (the pid containerd's shim reaps, through
// tent-runc), in the sandbox's own namespaces, and exits with the main
// command's status once everything else in the sandbox is gone: 7 from
// the main command; 128+SIGKILL for a sandbox ended while it runs.
func TestLaunchChildParentReaps(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	child, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sh", "-c", "sleep 60 & exit 7"}, ParentReaps: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := child.Info.InitPID
	if pid <= 0 || parentOf(t, pid) != os.Getpid() {
		t.Fatalf("the init %d: parent %d, want this process (%d)", pid, parentOf(t, pid), os.Getpid())
	}
	for _, ns := range []string{"pid", "mnt", "user"} {
		inside, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		if inside == "" || inside == ours {
			t.Errorf("the init's %s namespace is %q, this process's %q: want its own", ns, inside, ours)
		}
	}
	if err := sbOf(t, b, child.Info.ID).StartMain(ctx); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("the init ended with %#x, %v; want exit status 7, the main command's", ws, err)
	}
	// Its pid namespace died with it: the background sleep too.
	for _, dir := range child.Info.CgroupPaths {
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && len(bytes.TrimSpace(procs)) > 0 {
			t.Errorf("the sandbox's cgroup %s still holds %q once its init has exited", dir, procs)
		}
	}
	if code, err := child.Wait(); err != nil || code != 7 {
		t.Errorf("the supervisor exited with %d, %v; want 7 too", code, err)
	}

	running, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sleep", "60"}, ParentReaps: true})
	if err != nil {
		t.Fatal(err)
	}
	sb := sbOf(t, b, running.Info.ID)
	if err := sb.StartMain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Wait4(running.Info.InitPID, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 128+int(syscall.SIGKILL) {
		t.Errorf("the init of a sandbox ended while its main command ran: %#x, %v; want exit status %d", ws, err, 128+int(syscall.SIGKILL))
	}
	if code, err := running.Wait(); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Errorf("its supervisor exited with %d, %v; want %d", code, err, 128+int(syscall.SIGKILL))
	}

	// A supervisor that dies (SIGKILL) takes the sandbox with it: its
	// init, which has no parent-death signal here, ends with its control
	// socket, as its main command killed.
	crashed, err := b.LaunchChild(ctx, ChildLaunch{Args: []string{"sleep", "60"}, ParentReaps: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sbOf(t, b, crashed.Info.ID).StartMain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(crashed.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Wait4(crashed.Info.InitPID, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 128+int(syscall.SIGKILL) {
		t.Errorf("the init of a sandbox whose supervisor died: %#x, %v; want exit status %d", ws, err, 128+int(syscall.SIGKILL))
	}
	_, _ = crashed.Wait()
	if err := sbOf(t, b, crashed.Info.ID).Terminate(ctx); err != nil {
		t.Errorf("removing the crashed supervisor's sandbox: %v", err)
	}
}
