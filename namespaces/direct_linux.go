package namespaces

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/seccomp"
)

// credsError marks a failure of Creds.setThread inside dropCaps.
type credsError struct{ err error }

func (e *credsError) Error() string { return e.err.Error() }

// setThread sets the calling thread's supplementary groups (c.Groups,
// often none), gid and uid with raw syscalls: the libc-style wrappers
// (syscall.Setresuid, and x/sys/unix's) change every thread of the
// process, which must not happen here. Needs CAP_SETUID and CAP_SETGID.
func (c *Creds) setThread() error {
	var groups unsafe.Pointer
	if len(c.Groups) > 0 {
		groups = unsafe.Pointer(&c.Groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.Groups)), uintptr(groups), 0); e != 0 {
		// An unprivileged caller's user namespace denies setgroups: its
		// commands keep the groups they have (the caller's, unmapped
		// inside), as they do without Creds.
		if !(e == unix.EPERM && len(c.Groups) == 0 && setgroupsDenied()) {
			return &credsError{os.NewSyscallError("setgroups", e)}
		}
	}
	g, u := uintptr(c.GID), uintptr(c.UID)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, g, g, g); e != 0 {
		return &credsError{os.NewSyscallError("setresgid", e)}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, u, u, u); e != 0 {
		return &credsError{os.NewSyscallError("setresuid", e)}
	}
	return nil
}

// Direct describes a command started straight from the calling process,
// without any namespace: tent's reduced tier, for hosts where user
// namespaces are unavailable. Paths (Exec.Path, Exec.Dir, the Landlock
// rules) are host paths.
type Direct struct {
	// Exec is the command; Path is looked up in Env's PATH.
	Exec Exec
	// Stdio are the command's fds 0, 1 and 2 (descriptors of the caller,
	// left open).
	Stdio [3]int
	// LandlockABI is the ABI to enforce; 0 disables Landlock.
	LandlockABI int
	// LandlockRules are the path rules on host paths; everything else is
	// denied. Rules whose path does not exist are skipped.
	LandlockRules []fs.LandlockRule
	// NoTCP also denies every TCP bind and connect through Landlock
	// (ABI 4 and later; see fs.BuildRulesetNoTCP).
	NoTCP bool
	// Programs are the seccomp filters, installed in order.
	Programs []seccomp.Program
	// Rlimits are applied to the command through the trampoline
	// ([ExecArg0]): the host binary re-executed, which sets them and execs
	// the command. The host binary is then allowed read and execute by
	// Landlock, through its descriptor only.
	Rlimits []Rlimit
	// Creds, when set, are the command's host uid and gid (see [Creds]).
	Creds *Creds
	// Gate, when set, is the read end of a pipe that holds the command
	// back: it starts as the trampoline ([ExecArg0]), which waits until
	// one byte arrives on Gate (or the write end is closed) before it
	// execs the command. The caller moves the pid into the sandbox's
	// cgroup meanwhile, so no instruction of the command runs outside it,
	// on cgroup v1 and v2 alike (clone3's CLONE_INTO_CGROUP is not an
	// option: tent's default seccomp profile answers clone3 with ENOSYS).
	Gate *os.File
}

// StartDirect starts d's command and returns its pid, or the stage that
// failed ("exec", "rlimits", "landlock", "credentials", "capabilities",
// "no_new_privs", "seccomp") and why. The command is forked from a fresh
// OS thread of the calling process that first takes every restriction
// with [RestrictThread] and is discarded afterwards, so the caller itself
// stays unrestricted. It runs in a session and process group of its own
// (setsid), with exactly fds 0, 1 and 2, as a child of the calling
// process: the caller reaps it (wait4 on the pid).
//
// Unlike a sandbox's init, nothing here owns the command's descendants:
// the caller must find and kill them (a cgroup, or the process group and
// a child subreaper).
func StartDirect(d Direct) (int, string, error) {
	path, err := lookPath(d.Exec.Path, d.Exec.Env)
	if err != nil {
		return 0, "exec", err
	}
	execPath, args, env := path, d.Exec.Args, d.Exec.Env
	var execFDs []int
	if len(d.Rlimits) > 0 || d.Gate != nil {
		exe, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, "rlimits", os.NewSyscallError("open /proc/self/exe", err)
		}
		defer unix.Close(exe)
		execFDs = []int{exe}
		if execPath, args, env, err = trampoline(exe, path, d.Exec, d.Rlimits); err != nil {
			return 0, "rlimits", err
		}
		if d.Gate != nil {
			env = append(env, gateEnv+"=3")
		}
	}
	ruleset := -1
	if d.LandlockABI > 0 {
		build := fs.BuildRuleset
		if d.NoTCP {
			build = fs.BuildRulesetNoTCP
		}
		if ruleset, err = build(d.LandlockABI, d.LandlockRules, d.Stdio[:], execFDs); err != nil {
			return 0, "landlock", err
		}
		defer unix.Close(ruleset)
	}
	done := make(chan forkResult, 1)
	go func() {
		// Restricted for good and never unlocked: the runtime discards
		// the thread when this goroutine returns. The command's parent
		// is then another thread of this process, which can still wait
		// for it.
		runtime.LockOSThread()
		if stage, err := RestrictThread(d.Creds, ruleset, d.Programs...); err != nil {
			done <- forkResult{stage: stage, err: err}
			return
		}
		files := []uintptr{uintptr(d.Stdio[0]), uintptr(d.Stdio[1]), uintptr(d.Stdio[2])}
		if d.Gate != nil {
			files = append(files, d.Gate.Fd()) // fd 3 of the trampoline, closed before it execs
		}
		pid, err := syscall.ForkExec(execPath, args, &syscall.ProcAttr{
			Dir: d.Exec.Dir, Env: env, Files: files,
			Sys: &syscall.SysProcAttr{Setsid: true},
		})
		if err != nil {
			err = fmt.Errorf("%s: %w", d.Exec.Path, err)
		}
		done <- forkResult{pid: pid, stage: "exec", err: err}
	}()
	r := <-done
	return r.pid, r.stage, r.err
}

// setgroupsDenied reports whether this process's user namespace denies
// setgroups (/proc/self/setgroups is "deny").
func setgroupsDenied() bool {
	b, err := os.ReadFile("/proc/self/setgroups")
	return err == nil && strings.TrimSpace(string(b)) == "deny"
}
