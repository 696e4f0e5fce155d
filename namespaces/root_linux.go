package namespaces

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/seccomp"
)

// restrictEnv names the trampoline's descriptors of the restrictions it
// applies to itself before it execs the command: "L,S,E", L a Landlock
// ruleset (or -1), S a memfd holding a marshaled seccomp program (or -1)
// and E a memfd holding the command's environment (NUL-separated). It is
// set only for a command run as root (Exec.Root), whose trampoline starts
// unrestricted in its nested user namespace: that trampoline runs with
// tent's variables alone, so that nothing of the caller's environment
// (LD_PRELOAD, GODEBUG...) acts on it before it is restricted.
const restrictEnv = "TENT_RESTRICT"

// ErrRootNeedsUserNS refuses Exec.Root in a sandbox without a user
// namespace of its own: the nested namespace's 0 would be a host id.
var ErrRootNeedsUserNS = errors.New("running a command as root needs the sandbox's own user namespace (tent's full tier)")

// spawnRoot starts e as root inside: in a user namespace nested in the
// sandbox's (and a cgroup namespace, as every command gets), whose only
// mapped uid and gid, 0, are the init's — the sandbox's user — as
// `unshare -r` makes them. The command is root in its own view (id -u is
// 0; the sandbox user's files are its own) and gains nothing over the
// sandbox's user: its capabilities are those of a namespace that owns no
// mount, network or pid namespace and maps no other id, and it holds none
// of them anyway.
//
// The seccomp filter refuses CLONE_NEWUSER to restricted threads, so the
// namespace is made by cloning from the init's own (unrestricted) thread
// into the trampoline ([ExecArg0]). The init writes the namespace's maps
// once the trampoline has exec'd (the clone, a non-dumpable copy of the
// init, has a /proc/PID/uid_map the init cannot open) and then opens its
// gate; the trampoline, now uid 0 without capabilities (they were
// computed at its exec, before the map), execs itself once more to be
// root of its namespace, then — before anything of the command runs —
// empties every capability set (bounding included), sets no_new_privs,
// enforces the sandbox's Landlock ruleset and installs its seccomp
// program (see [restrictEnv]), applies the rlimits and execs the command
// with its environment. Until then the process runs only the host binary,
// with tent's variables alone, which no command can trace or write to
// (ptrace and process_vm_writev are refused by the seccomp filter, and a
// Landlock domain cannot trace a process outside it).
func (s *spawner) spawnRoot(e Exec, stdio [3]int) (int, string, error) {
	if e.FileHelper {
		return 0, "root", fmt.Errorf("the file helper does not run as root: %w", syscall.EINVAL)
	}
	if initialUserNS() {
		return 0, "root", ErrRootNeedsUserNS
	}
	path, err := lookPath(e.Path, e.Env)
	if err != nil {
		return 0, "exec", err
	}
	exe, err := s.selfFD()
	if err != nil {
		return 0, "exec", err
	}
	ruleset := -1
	if s.cfg.LandlockABI > 0 {
		if ruleset, err = fs.BuildRuleset(s.cfg.LandlockABI, s.cfg.LandlockRules, stdio[:], nil); err != nil {
			return 0, "landlock", err
		}
		defer unix.Close(ruleset)
	}
	filter := -1
	if len(s.cfg.Seccomp) > 0 {
		if filter, err = sealedMemfd("tent-seccomp", s.cfg.Seccomp); err != nil {
			return 0, "seccomp", err
		}
		defer unix.Close(filter)
	}
	// The child's ends of the pipes are closed once it has them (before
	// the verdict is read: its EOF is the command's exec), or on failure.
	var childEnds []int
	closeChildEnds := func() {
		for _, fd := range childEnds {
			unix.Close(fd)
		}
		childEnds = nil
	}
	defer closeChildEnds()
	var errPipe, gate [2]int
	if err := unix.Pipe2(errPipe[:], unix.O_CLOEXEC); err != nil {
		return 0, "exec", os.NewSyscallError("pipe2", err)
	}
	defer unix.Close(errPipe[0])
	childEnds = append(childEnds, errPipe[1])
	if err := unix.Pipe2(gate[:], unix.O_CLOEXEC); err != nil {
		return 0, "exec", os.NewSyscallError("pipe2", err)
	}
	defer unix.Close(gate[1])
	childEnds = append(childEnds, gate[0])
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2]), uintptr(exe), uintptr(errPipe[1]), uintptr(gate[0])}
	fdOf := func(fd int) int {
		if fd < 0 {
			return -1
		}
		files = append(files, uintptr(fd))
		return len(files) - 1
	}
	cmdEnv, err := sealedMemfd("tent-env", []byte(strings.Join(e.Env, "\x00")))
	if err != nil {
		return 0, "exec", err
	}
	defer unix.Close(cmdEnv)
	restrict := fmt.Sprintf("%d,%d,%d", fdOf(ruleset), fdOf(filter), fdOf(cmdEnv))
	args := append([]string{ExecArg0, path}, e.Args...)
	env := []string{execErrEnv + "=4", gateEnv + "=5", restrictEnv + "=" + restrict}
	if len(s.cfg.Rlimits) > 0 {
		b, err := json.Marshal(s.cfg.Rlimits)
		if err != nil {
			return 0, "rlimits", err
		}
		env = append(env, rlimitsEnv+"="+string(b))
	}
	sys := &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWUSER}
	if e.TTY != nil {
		sys.Setctty, sys.Ctty = true, 0
	}
	pid, stage, err := s.forkRoot(exe, args, &syscall.ProcAttr{Dir: e.Dir, Env: env, Files: files, Sys: sys})
	closeChildEnds()
	if err != nil {
		if stage == "root" {
			return 0, "root", fmt.Errorf("%s as root: %w", e.Path, err)
		}
		return 0, stage, err
	}
	if stage, err := releaseRoot(pid, fmt.Sprintf("/proc/self/fd/%d", exe), e.Path, gate[1], errPipe[0]); err != nil {
		return 0, stage, err
	}
	return pid, "", nil
}

// forkRoot forks the trampoline (the host binary, exe) from a thread of
// its own, discarded after: in a cgroup namespace rooted at the
// sandbox's cgroup and in the commands' cgroup, as a restricted thread's
// commands are.
func (s *spawner) forkRoot(exe int, args []string, attr *syscall.ProcAttr) (pid int, stage string, err error) {
	type forked struct {
		pid   int
		stage string
		err   error
	}
	done := make(chan forked, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime discards the thread
		if stage, err := s.enterCommandsCgroup(); err != nil {
			done <- forked{stage: stage, err: err}
			return
		}
		pid, err := syscall.ForkExec(fmt.Sprintf("/proc/self/fd/%d", exe), args, attr)
		done <- forked{pid: pid, stage: "root", err: err}
	}()
	f := <-done
	return f.pid, f.stage, f.err
}

// releaseRoot lets the trampoline pid (the command path as root) go on:
// it writes its namespace's maps, opens its gate and waits for the
// command's exec (errPipe). A failure kills it (the init's loop reaps
// it) and names the stage that failed.
func releaseRoot(pid int, exe, path string, gate, errPipe int) (string, error) {
	_ = initOOM.raise(pid, exe) // before the command runs (see CommandOOMScoreAdj); best effort
	// The maps are written now that the trampoline has exec'd: before,
	// the child was a copy of the init, non-dumpable, and its
	// /proc/PID/uid_map belonged to an id the init cannot write as.
	if err := writeNestedMaps(pid, exe, os.Geteuid(), os.Getegid()); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL) // reaped by the init's loop
		return "root", fmt.Errorf("%s as root: %w", path, err)
	}
	if _, err := unix.Write(gate, []byte{1}); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return "root", os.NewSyscallError("write", err)
	}
	if err := readExecErr(errPipe, path); err != nil {
		return "exec", err
	}
	return "", nil
}

// writeNestedMaps maps uid and gid 0 of pid's user namespace to uid and
// gid (the init's), with setgroups denied: the one group is all it has.
// pid has exec'd exe, the trampoline (see writeAfterExec).
func writeNestedMaps(pid int, exe string, uid, gid int) error {
	for _, w := range []struct{ name, data string }{
		{"uid_map", fmt.Sprintf("0 %d 1\n", uid)},
		{"setgroups", "deny"},
		{"gid_map", fmt.Sprintf("0 %d 1\n", gid)},
	} {
		if err := writeAfterExec(pid, exe, w.name, w.data); err != nil {
			return fmt.Errorf("writing the nested user namespace's %s: %w", w.name, err)
		}
	}
	return nil
}

// initialUserNS reports whether the calling process is in the host's
// user namespace (its uid map is the identity over every id).
func initialUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true // fail closed
	}
	f := strings.Fields(string(b))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// sealedMemfd returns a close-on-exec memfd holding b, sealed against
// every change.
func sealedMemfd(name string, b []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, os.NewSyscallError("memfd_create", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return -1, os.NewSyscallError("fcntl(F_ADD_SEALS)", err)
	}
	nfd, err := unix.Dup(fd)
	f.Close()
	if err != nil {
		return -1, os.NewSyscallError("dup", err)
	}
	unix.CloseOnExec(nfd)
	return nfd, nil
}

// restrictSelf is the trampoline's part of a command run as root: v is
// restrictEnv's value. It locks the calling goroutine to its thread for
// good (the exec that follows must come from the restricted thread),
// applies every restriction, checks that no capability is left that an
// exec as uid 0 could turn into a privilege, and returns the command's
// environment.
func restrictSelf(v string) ([]string, error) {
	f := strings.Split(v, ",")
	var fds [3]int
	for i := range fds {
		var err error
		if len(f) != len(fds) {
			return nil, fmt.Errorf("bad %s %q", restrictEnv, v)
		}
		if fds[i], err = strconv.Atoi(f[i]); err != nil {
			return nil, fmt.Errorf("bad %s %q", restrictEnv, v)
		}
	}
	ruleset, filter, envFD := fds[0], fds[1], fds[2]
	if envFD < 0 {
		return nil, fmt.Errorf("bad %s %q: no environment", restrictEnv, v)
	}
	envData, err := readSealed(envFD, "tent-env")
	if err != nil {
		return nil, fmt.Errorf("reading the environment: %w", err)
	}
	var env []string
	if len(envData) > 0 {
		env = strings.Split(string(envData), "\x00")
	}
	var progs []seccomp.Program
	if filter >= 0 {
		b, err := readSealed(filter, "tent-seccomp")
		if err != nil {
			return nil, fmt.Errorf("reading the seccomp program: %w", err)
		}
		if progs, err = seccomp.UnmarshalStack(b); err != nil {
			return nil, err
		}
	}
	runtime.LockOSThread() // never unlocked: this thread execs the command
	if stage, err := RestrictThread(nil, ruleset, progs...); err != nil {
		return nil, fmt.Errorf("%s: %w", stage, err)
	}
	if ruleset >= 0 {
		unix.Close(ruleset)
	}
	for c := 0; c <= lastCap(); c++ {
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil || in != 0 {
			return nil, fmt.Errorf("capability %d is still in the bounding set", c)
		}
	}
	return env, nil
}

// readSealed reads (at most 16 MiB of) the memfd fd and closes it.
func readSealed(fd int, name string) ([]byte, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 16<<20))
	return bytes.Clone(b), err
}
