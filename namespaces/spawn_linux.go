package namespaces

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/seccomp"
)

// spawn starts the command with every per-process protection. It returns
// the command's pid, or the stage that failed and why.
func spawn(cfg *Config, e Exec, prog seccomp.Program, stdio [3]int) (int, string, error) {
	var path string
	var err error
	var execFDs []int
	// The host binary, for the rlimit trampoline and the file helper.
	self := func() (int, error) {
		exe, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, os.NewSyscallError("open /proc/self/exe", err)
		}
		execFDs = append(execFDs, exe)
		return exe, nil
	}
	defer func() { closeAll(execFDs) }()
	if e.FileHelper {
		exe, err := self()
		if err != nil {
			return 0, "exec", err
		}
		path = fmt.Sprintf("/proc/self/fd/%d", exe)
		e.Args = append([]string{fs.FileHelperArg0}, e.Args...)
	} else if path, err = lookPath(e.Path, e.Env); err != nil {
		return 0, "exec", err
	}
	// Resource limits go through the trampoline (see ExecArg0).
	execPath, args, env := path, e.Args, e.Env
	if len(cfg.Rlimits) > 0 && !e.FileHelper {
		exe, err := self()
		if err != nil {
			return 0, "rlimits", err
		}
		if execPath, args, env, err = trampoline(exe, path, e, cfg.Rlimits); err != nil {
			return 0, "rlimits", err
		}
	}
	ruleset := -1
	if cfg.LandlockABI > 0 {
		ruleset, err = fs.BuildRuleset(cfg.LandlockABI, cfg.LandlockRules, stdio[:], execFDs)
		if err != nil {
			return 0, "landlock", err
		}
		defer unix.Close(ruleset)
	}
	type result struct {
		pid   int
		stage string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// This thread is restricted for good and is never unlocked: when
		// the goroutine returns, the runtime discards the thread.
		runtime.LockOSThread()
		pid, stage, err := forkRestricted(e, execPath, args, env, prog, ruleset, stdio)
		done <- result{pid, stage, err}
	}()
	r := <-done
	return r.pid, r.stage, r.err
}

// forkRestricted runs on a locked, disposable thread: it applies every
// per-thread restriction, then forks and execs the command from it.
func forkRestricted(e Exec, path string, args, env []string, prog seccomp.Program, ruleset int, stdio [3]int) (int, string, error) {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return 0, "cgroupns", os.NewSyscallError("unshare(CLONE_NEWCGROUP)", err)
	}
	if err := dropAllCaps(); err != nil {
		return 0, "capabilities", err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, "no_new_privs", os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
	}
	if ruleset >= 0 {
		if err := fs.RestrictThread(ruleset); err != nil {
			return 0, "landlock", err
		}
	}
	if len(prog) > 0 {
		if err := prog.Install(); err != nil {
			return 0, "seccomp", err
		}
	}
	pid, err := syscall.ForkExec(path, args, &syscall.ProcAttr{
		Dir:   e.Dir,
		Env:   env,
		Files: []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return 0, "exec", fmt.Errorf("%s: %w", e.Path, err)
	}
	return pid, "", nil
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
