//go:build linux

package sandbox_test

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
	"time"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
)

// idleAfter is the hand-off delay of the tests' idle sandboxes.
const idleAfter = 300 * time.Millisecond

// needHolder skips a test in builds without the idle holder (no cgo).
func needHolder(t *testing.T) {
	t.Helper()
	if !namespaces.IdleHolderAvailable() {
		t.Skip("this build has no idle holder (built without cgo)")
	}
}

// initArgv0 is argv[0] of the process that holds sb's namespaces now.
func initArgv0(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(sb.Info().InitPID) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	arg0, _, _ := strings.Cut(string(b), "\x00")
	return arg0
}

// checkNonDumpable fails the test when pid is dumpable (its memory
// readable by a process of its uid). The kernel gives a non-dumpable
// process's /proc files to the host uid of its user namespace's root
// (root when that is unmapped) instead of to the process's own uid, so
// this is visible whenever those two differ: for an unprivileged caller,
// whose sandbox maps only its own uid. (As root, uid 0 inside maps to the
// very uid the init runs as; the check then says nothing and logs so.)
// An exec makes a process dumpable again until its code clears the flag
// (the holder first thing, the Go init early in its start), so the flag
// has 2 s to clear after argv[0] has changed.
func checkNonDumpable(t *testing.T, pid int, what string) {
	t.Helper()
	proc := "/proc/" + strconv.Itoa(pid)
	status, _ := os.ReadFile(proc + "/status")
	euid := -1
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 1 {
				euid, _ = strconv.Atoi(f[1])
			}
		}
	}
	rootOwner := 0 // the namespace's root when unmapped: the host's root
	uidMap, _ := os.ReadFile(proc + "/uid_map")
	for _, l := range strings.Split(string(uidMap), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "0" {
			rootOwner, _ = strconv.Atoi(f[1])
		}
	}
	if rootOwner == euid {
		t.Logf("%s: dumpable or not, its /proc files belong to uid %d: not checked", what, euid)
		return
	}
	var st syscall.Stat_t
	owned := func() bool { return syscall.Stat(proc+"/status", &st) == nil && int(st.Uid) == rootOwner }
	if !waitFor(2*time.Second, owned) {
		t.Errorf("%s is dumpable: its /proc files belong to uid %d, not %d", what, st.Uid, rootOwner)
	}
}

// waitFor polls cond every 20 ms until it holds or d has passed.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// An idle long-lived sandbox's init gives way to the idle holder (C code
// that runs before any Go runtime), which reaps orphans and survives the
// host's signals as the init does; the next request brings the init back with all it
// had: the attached mount's Landlock rule, the sandbox's files, the same
// pid.
func TestIdleInitHandsOffAndResumes(t *testing.T) {
	t.Parallel()
	needHolder(t)
	// No seccomp filter: the probes at the end meet the init's own
	// defences (non-dumpable, capabilities), not the filter's EPERM.
	spec := withProbe(t, sandbox.Spec{Seccomp: sandbox.Seccomp{Unconfined: true}})
	sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{IdleAfter: idleAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Terminate(context.Background()) })
	pid := sb.Info().InitPID
	src := rwDir(t)
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/work", Access: sandbox.ReadWrite}); err != nil {
		t.Fatal(err)
	}
	// An orphan that outlives the handoff: the holder must reap it.
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo before > /tmp/f; sleep 5 >/dev/null 2>&1 &"}}); res.ExitCode != 0 {
		t.Fatalf("first exec: %+v", res)
	}
	if arg0 := initArgv0(t, sb); arg0 != namespaces.InitArg0 {
		t.Fatalf("busy sandbox's init is %q", arg0)
	}
	if !waitFor(idleAfter+5*time.Second, func() bool { return initArgv0(t, sb) == namespaces.IdleArg0 }) {
		t.Fatalf("no idle holder after %v: init is %q", idleAfter+5*time.Second, initArgv0(t, sb))
	}
	checkNonDumpable(t, pid, "the idle holder")
	// The host's signals other than SIGKILL and SIGSTOP do not reach PID 1
	// of a pid namespace that has no handler for them (the holder has
	// none): each of these would end an ordinary process.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	// The orphan (sleep 5) exits while the holder is in charge and leaves
	// no zombie behind.
	children := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"
	if !waitFor(10*time.Second, func() bool {
		b, err := os.ReadFile(children)
		return err == nil && strings.TrimSpace(string(b)) == ""
	}) {
		b, _ := os.ReadFile(children)
		t.Fatalf("the holder left children %q", b)
	}
	if arg0 := initArgv0(t, sb); arg0 != namespaces.IdleArg0 {
		t.Fatalf("after the signals and the orphan's exit the init is %q", arg0)
	}
	// The first request after idling: the file API, which runs tent's own
	// file helper through the binary's descriptor the holder kept.
	var f bytes.Buffer
	if err := sb.ReadFile(context.Background(), "/tmp/f", &f, sandbox.ReadOptions{}); err != nil || f.String() != "before\n" {
		t.Fatalf("ReadFile after the idle time: %q %v", f.String(), err)
	}
	out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /tmp/f && echo after > /work/out"}})
	if res.ExitCode != 0 || out != "before" {
		t.Fatalf("exec after the idle time: %+v %q", res, out)
	}
	if b, err := os.ReadFile(filepath.Join(src, "out")); err != nil || string(b) != "after\n" {
		t.Fatalf("the attached mount after resume: %q %v", b, err)
	}
	if sb.Info().InitPID != pid || initArgv0(t, sb) != namespaces.InitArg0 {
		t.Fatalf("resumed init: pid %d (was %d), argv[0] %q", sb.Info().InitPID, pid, initArgv0(t, sb))
	}
	checkNonDumpable(t, pid, "the resumed init")
	// The resumed init is as closed to the sandbox as the first one.
	expect(t, "ptrace(PTRACE_ATTACH, 1)", probeIn(t, sb, "ptrace", "1"), "EPERM")
	expect(t, "open /proc/1/mem", probeIn(t, sb, "open", "/proc/1/mem", "r"), "EACCES")
}

// Terminating an idle sandbox (its holder in charge) leaves nothing.
func TestIdleSandboxTerminates(t *testing.T) {
	t.Parallel()
	needHolder(t)
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{IdleAfter: idleAfter})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "setsid sleep 318 >/dev/null 2>&1 &"}}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(idleAfter+5*time.Second, func() bool { return initArgv0(t, sb) == namespaces.IdleArg0 }) {
		t.Fatalf("no idle holder: init is %q", initArgv0(t, sb))
	}
	pid := sb.Info().InitPID
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the holder (pid %d) outlived terminate: %v", pid, err)
	}
	assertNoProcess(t, "sleep", "318")
	for _, c := range sb.Info().CgroupPaths {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after terminate (%v)", c, err)
		}
	}
}

// A negative IdleAfter keeps the init (while one with a short delay is
// handed off in the same time), and a running command keeps it too.
func TestIdleHandOffCanBeDisabledAndWaitsForCommands(t *testing.T) {
	t.Parallel()
	needHolder(t)
	never, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = never.Terminate(context.Background()) })
	busy, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{IdleAfter: idleAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Terminate(context.Background()) })
	quiet, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{IdleAfter: idleAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quiet.Terminate(context.Background()) })
	// The busy sandbox's command runs until the test closes its stdin.
	stdin, release := io.Pipe()
	exited := make(chan error, 1)
	go func() {
		_, err := busy.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "cat >/dev/null"}, Stdin: stdin})
		exited <- err
	}()
	if !waitFor(idleAfter+5*time.Second, func() bool { return initArgv0(t, quiet) == namespaces.IdleArg0 }) {
		t.Fatalf("no idle holder: init is %q", initArgv0(t, quiet))
	}
	time.Sleep(idleAfter)
	if got := initArgv0(t, never); got != namespaces.InitArg0 {
		t.Errorf("IdleAfter < 0: the init is %q", got)
	}
	if got := initArgv0(t, busy); got != namespaces.InitArg0 {
		t.Errorf("while a command runs: the init is %q", got)
	}
	// The command's exit status still comes from the init, and once it
	// is done the init may go.
	release.Close()
	if err := <-exited; err != nil {
		t.Fatal(err)
	}
	if !waitFor(idleAfter+5*time.Second, func() bool { return initArgv0(t, busy) == namespaces.IdleArg0 }) {
		t.Fatalf("no idle holder after the command: init is %q", initArgv0(t, busy))
	}
}
