package namespaces

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/fs/files"
	"github.com/tent-sandbox/tent/seccomp"
)

// spawner starts the sandbox's commands with every per-process
// protection.
type spawner struct {
	cfg   *Config
	progs []seccomp.Program
	// self is an O_PATH descriptor of the host binary (/proc/self/exe),
	// for the rlimit trampoline and the file helper; -1 until needed.
	self int
	// forker is the kept restricted thread (Config.ReuseThread); nil
	// until the first exec that can use it.
	forker chan<- forkRequest
	// commands is the file through which a thread joins the commands'
	// cgroup (Config.CommandsCgroup), or -1.
	commands int
}

func newSpawner(cfg *Config, progs []seccomp.Program) *spawner {
	return &spawner{cfg: cfg, progs: progs, self: -1, commands: -1}
}

// joinCommands moves the calling thread, alone, into the commands' cgroup
// (Config.CommandsCgroup), when there is one: what it forks then counts
// against the sandbox's pids limit.
func (s *spawner) joinCommands() error {
	if s.commands < 0 {
		return nil
	}
	if _, err := unix.Write(s.commands, []byte("0")); err != nil {
		return fmt.Errorf("joining the commands' cgroup: %w", os.NewSyscallError("write", err))
	}
	return nil
}

// selfFD opens (once) the descriptor of the host binary.
func (s *spawner) selfFD() (int, error) {
	if s.self >= 0 {
		return s.self, nil
	}
	exe, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open /proc/self/exe", err)
	}
	s.self = exe
	return exe, nil
}

// spawn starts the command e with stdio as its fds 0-2. It returns the
// command's pid, or the stage that failed and why. With reuse (a
// long-lived sandbox's execs), a command that needs no Landlock rule of
// its own is forked from the kept restricted thread.
func (s *spawner) spawn(e Exec, stdio [3]int, reuse bool) (int, string, error) {
	var path string
	var err error
	if err := checkWorkDir(e.Dir); err != nil {
		return 0, "workdir", err
	}
	if e.Root {
		if e.User != nil {
			return 0, "credentials", errors.New("a command runs as root or as a user, not both")
		}
		return s.spawnRoot(e, stdio)
	}
	needSelf := e.FileHelper || len(s.cfg.Rlimits) > 0
	var exe int
	if needSelf {
		if exe, err = s.selfFD(); err != nil {
			return 0, "exec", err
		}
	}
	if e.FileHelper {
		path = fmt.Sprintf("/proc/self/fd/%d", exe)
		e.Args = append([]string{files.FileHelperArg0}, e.Args...)
	} else if path, err = lookPath(e.Path, e.Env); err != nil {
		return 0, "exec", err
	}
	// Resource limits go through the trampoline (see ExecArg0), which
	// reports a failure of its own execve on a close-on-exec pipe, so
	// that a command that is missing or not executable is told apart
	// from one that ran and exited 127 or 126, as without limits.
	// The trampoline waits at a gate (fd 5) after its exec until the init
	// has given it the commands' OOM score (see CommandOOMScoreAdj), so
	// that the command runs with it from its first instruction.
	execPath, args, env := path, e.Args, e.Env
	errPipe, gate := [2]int{-1, -1}, [2]int{-1, -1}
	var extra []int // the trampoline's fds 3 (the host binary), 4 (errPipe) and 5 (gate)
	if len(s.cfg.Rlimits) > 0 && !e.FileHelper {
		if execPath, args, env, err = trampoline(3, path, e, s.cfg.Rlimits); err != nil {
			return 0, "rlimits", err
		}
		if err := unix.Pipe2(errPipe[:], unix.O_CLOEXEC); err != nil {
			return 0, "rlimits", os.NewSyscallError("pipe2", err)
		}
		defer unix.Close(errPipe[0])
		if err := unix.Pipe2(gate[:], unix.O_CLOEXEC); err != nil {
			unix.Close(errPipe[1])
			return 0, "rlimits", os.NewSyscallError("pipe2", err)
		}
		defer unix.Close(gate[1])
		env = append(env, execErrEnv+"=4", gateEnv+"=5")
		extra = []int{exe, errPipe[1], gate[0]}
	}
	// forked runs on this (unrestricted) thread once the fork is done:
	// the command, or its trampoline, has exec'd.
	forked := func(pid int, stage string, err error) (int, string, error) {
		if err == nil {
			_ = initOOM.raise(pid, execPath) // best effort: see oomScore.raise
		}
		if errPipe[1] >= 0 {
			unix.Close(errPipe[1])
			unix.Close(gate[0])
			if err == nil {
				if _, werr := unix.Write(gate[1], []byte{1}); werr != nil {
					_ = unix.Kill(pid, unix.SIGKILL) // reaped by the init's loop
					return 0, "rlimits", os.NewSyscallError("write", werr)
				}
				if err = readExecErr(errPipe[0], e.Path); err != nil {
					return 0, "exec", err
				}
			}
		}
		return pid, stage, err
	}
	// The kept thread runs as the init's ids: a command as another user
	// gets a thread of its own.
	if reuse && s.cfg.ReuseThread && e.User == nil && !s.needsDeviceRule(stdio) {
		return forked(s.forkFromKept(forkRequest{e: e, path: execPath, args: args, env: env, stdio: stdio, extra: extra}))
	}
	var execFDs []int
	if needSelf {
		execFDs = []int{exe}
	}
	ruleset := -1
	if s.cfg.LandlockABI > 0 {
		ruleset, err = fs.BuildRuleset(s.cfg.LandlockABI, s.cfg.LandlockRules, stdio[:], execFDs)
		if err != nil {
			return 0, "landlock", err
		}
		defer unix.Close(ruleset)
	}
	done := make(chan forkResult, 1)
	go func() {
		// This thread is restricted for good and is never unlocked: when
		// the goroutine returns, the runtime discards the thread.
		runtime.LockOSThread()
		if stage, err := s.restrictThreadAs(e.User, ruleset); err != nil {
			done <- forkResult{stage: stage, err: err}
			return
		}
		pid, err := forkExec(e, execPath, args, env, stdio, extra)
		done <- forkResult{pid: pid, stage: "exec", err: err}
	}()
	r := <-done
	return forked(r.pid, r.stage, r.err)
}

// rulesChanged drops the kept thread after the Landlock rules grew (a
// writable mount was attached): its domain lacks the new rules, and a
// domain can only ever shrink. The next exec restricts a new one.
func (s *spawner) rulesChanged() {
	if s.forker != nil {
		close(s.forker) // its goroutine returns and the thread is discarded
		s.forker = nil
	}
}

// needsDeviceRule reports whether one of the command's stdio descriptors
// is a device other than /dev/null (a terminal): Landlock then needs a
// rule allowing its ioctls, which the kept thread's domain does not have.
func (s *spawner) needsDeviceRule(stdio [3]int) bool {
	if s.cfg.LandlockABI == 0 {
		return false
	}
	for _, fd := range stdio {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return true // let the per-exec path report it
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev != unix.Mkdev(1, 3) {
			return true
		}
	}
	return false
}

type forkRequest struct {
	e         Exec
	path      string
	args, env []string
	stdio     [3]int
	extra     []int // the trampoline's fds 3 and 4, or none
	reply     chan forkResult
}

type forkResult struct {
	pid   int
	stage string
	err   error
}

// forkFromKept forks r from the kept restricted thread, starting that
// thread first if need be.
//
// The thread carries exactly the restrictions a per-exec thread gets —
// its own cgroup namespace, no capabilities, no_new_privs, the sandbox's
// Landlock domain, the seccomp filter — with one Landlock rule more: read
// and execute on the host binary's inode (the trampoline and the file
// helper exec it through a descriptor), which commands cannot reach by
// any path that the sandbox's rules do not already allow. Keeping it
// saves creating, restricting and discarding a thread (and compiling the
// seccomp filter) on every exec.
func (s *spawner) forkFromKept(r forkRequest) (int, string, error) {
	if s.forker == nil {
		exe, err := s.selfFD()
		if err != nil {
			return 0, "exec", err
		}
		ruleset := -1
		if s.cfg.LandlockABI > 0 {
			ruleset, err = fs.BuildRuleset(s.cfg.LandlockABI, s.cfg.LandlockRules, nil, []int{exe})
			if err != nil {
				return 0, "landlock", err
			}
		}
		reqs := make(chan forkRequest)
		started := make(chan forkResult, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread is restricted for good
			stage, err := s.restrictThread(ruleset)
			if ruleset >= 0 {
				unix.Close(ruleset)
			}
			started <- forkResult{stage: stage, err: err}
			if err != nil {
				return
			}
			for r := range reqs {
				pid, err := forkExec(r.e, r.path, r.args, r.env, r.stdio, r.extra)
				r.reply <- forkResult{pid: pid, stage: "exec", err: err}
			}
		}()
		if res := <-started; res.err != nil {
			return 0, res.stage, res.err
		}
		s.forker = reqs
	}
	r.reply = make(chan forkResult, 1)
	s.forker <- r
	res := <-r.reply
	return res.pid, res.stage, res.err
}

// restrictThread applies every per-thread restriction to the calling
// (locked) thread, in its own cgroup namespace, rooted at the sandbox's
// cgroup, and moves it into the commands' cgroup; it returns the stage
// that failed.
func (s *spawner) restrictThread(ruleset int) (string, error) {
	return s.restrictThreadAs(nil, ruleset)
}

// restrictThreadAs is restrictThread switching to user's ids (of the
// sandbox's user namespace) when user is set ([Exec].User).
func (s *spawner) restrictThreadAs(user *Creds, ruleset int) (string, error) {
	if stage, err := s.enterCommandsCgroup(); err != nil {
		return stage, err
	}
	return RestrictThread(user, ruleset, s.progs...)
}

// enterCommandsCgroup gives the calling (locked) thread a cgroup
// namespace of its own, rooted at the sandbox's cgroup, then moves it
// into the commands' cgroup: what it forks is where every command is.
// It returns the stage that failed.
func (s *spawner) enterCommandsCgroup() (string, error) {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return "cgroupns", os.NewSyscallError("unshare(CLONE_NEWCGROUP)", err)
	}
	if err := s.joinCommands(); err != nil {
		return "cgroup", err
	}
	return "", nil
}

// RestrictThread applies tent's per-thread restrictions to the calling
// thread, in this order: when creds is set, the thread's groups, gid and
// uid become creds' (raw per-thread syscalls, never the whole process);
// every capability set is emptied; no_new_privs is set; the Landlock
// ruleset is enforced (when ruleset >= 0); each seccomp program is
// installed (stacked: the most restrictive verdict wins). It returns the
// stage that failed ("credentials", "capabilities", "no_new_privs",
// "landlock", "seccomp").
//
// Precondition: the goroutine is locked to its OS thread
// (runtime.LockOSThread) and never unlocks it: the restrictions cannot be
// undone, so the thread must be discarded by returning from the locked
// goroutine once it has forked what it restricts for.
func RestrictThread(creds *Creds, ruleset int, progs ...seccomp.Program) (string, error) {
	var between func() error
	var keep, ambient uint64
	if creds != nil {
		between, keep, ambient = creds.setThread, creds.Caps, creds.Ambient
	}
	if err := dropCaps(between, keep, ambient); err != nil {
		if ce, ok := err.(*credsError); ok {
			return "credentials", ce.err
		}
		return "capabilities", err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "no_new_privs", os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
	}
	if ruleset >= 0 {
		if err := fs.RestrictThread(ruleset); err != nil {
			return "landlock", err
		}
	}
	for _, prog := range progs {
		if len(prog) > 0 {
			if err := prog.Install(); err != nil {
				return "seccomp", err
			}
		}
	}
	return "", nil
}

// forkExec forks and execs the command from the calling, restricted
// thread, in a session of its own (the caller then gives it the
// commands' OOM score: see CommandOOMScoreAdj); with e.TTY, fd 0 (the
// terminal's peer) becomes its controlling terminal. extra become fds
// 3, 4, ...
// (the trampoline's: it marks them close-on-exec before its own execve).
func forkExec(e Exec, path string, args, env []string, stdio [3]int, extra []int) (int, error) {
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])}
	for _, fd := range extra {
		files = append(files, uintptr(fd))
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if e.TTY != nil {
		sys.Setctty, sys.Ctty = true, 0
	}
	pid, err := syscall.ForkExec(path, args, &syscall.ProcAttr{Dir: e.Dir, Env: env, Files: files, Sys: sys})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", e.Path, err)
	}
	return pid, nil
}

// checkWorkDir refuses a working directory that does not exist or is not
// a directory before anything is forked: the child's chdir would fail
// with the same ENOENT as a missing command, and be taken for one.
func checkWorkDir(dir string) error {
	if dir == "" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &dirError{dir: dir, errno: err.(syscall.Errno)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &dirError{dir: dir, errno: syscall.ENOTDIR}
	}
	return nil
}

// dirError is a refused working directory: its text is the path alone
// (the "error" message carries the errno beside it).
type dirError struct {
	dir   string
	errno syscall.Errno
}

func (e *dirError) Error() string { return e.dir }
func (e *dirError) Unwrap() error { return e.errno }

// readExecErr waits for the trampoline's verdict on its execve: EOF when
// the command replaced it (the pipe is close-on-exec), or the errno of
// the failed execve.
func readExecErr(fd int, name string) error {
	var b [4]byte
	for {
		n, err := unix.Read(fd, b[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < 4 {
			return nil
		}
		return fmt.Errorf("%s: %w", name, syscall.Errno(binary.NativeEndian.Uint32(b[:])))
	}
}

// lookPath resolves a program name with the command's own PATH, as its
// shell would, inside the sandbox's root.
func lookPath(name string, env []string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty command: %w", syscall.ENOENT)
	}
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if st.Mode&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", fmt.Errorf("%s: not executable: %w", name, syscall.EACCES)
	}
	return "", fmt.Errorf("%s: not found in PATH: %w", name, syscall.ENOENT)
}
