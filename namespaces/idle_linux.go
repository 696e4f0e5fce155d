package namespaces

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// IdleHolderAvailable reports whether this build has the idle holder (it
// is C code run before the Go runtime: builds with cgo).
func IdleHolderAvailable() bool { return holderAvailable }

// idleState is what an init hands to its idle holder, in a memfd, and
// reads back when the holder execs it again: everything the init keeps
// between requests. (Running commands are not in it: an init hands off
// only when none runs; orphans are the holder's to reap.)
type idleState struct {
	Config   *Config `json:"config"`
	Control  int     `json:"control"`
	Self     int     `json:"self"`
	HostView int     `json:"host_view"`
	// Sudo is Config.Sudo's listening socket (-1 without), which the
	// holder watches too: a waiting sudo wakes the init.
	Sudo int `json:"sudo"`
	// Commands is the commands' cgroup's file (Config.CommandsCgroup).
	Commands int `json:"commands"`
}

// handOff execs the idle holder (see idle_cgo_linux.go) in place of this
// init: a few hundred KiB resident instead of the Go runtime's several
// MiB, for as long as the sandbox has nothing to do. The holder execs the
// init again when the next message arrives, and the init then picks up
// where it left off (resumeState). The caller must not be reading conn.
// handOff returns only when the exec failed, having undone what it did.
func handOff(conn *os.File, cfg *Config, hostView, sudo int, sp *spawner) error {
	self, err := sp.selfFD()
	if err != nil {
		return err
	}
	ctl, err := ctlmsg.Dup(conn)
	if err != nil {
		return err
	}
	defer unix.Close(ctl)
	mfd, err := ctlmsg.WriteState("tent-init-state", idleState{Config: cfg, Control: ctl, Self: self, HostView: hostView, Sudo: sudo, Commands: sp.commands})
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	keep := []int{self}
	if hostView >= 0 {
		keep = append(keep, hostView)
	}
	if sudo >= 0 {
		keep = append(keep, sudo)
	}
	if sp.commands >= 0 {
		keep = append(keep, sp.commands)
	}
	for _, fd := range keep {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return os.NewSyscallError("fcntl", err)
		}
	}
	err = syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", self),
		[]string{holderArg0, strconv.Itoa(ctl), strconv.Itoa(self), strconv.Itoa(mfd), strconv.Itoa(sudo)}, os.Environ())
	for _, fd := range keep {
		unix.CloseOnExec(fd)
	}
	return fmt.Errorf("exec of the idle holder: %w", err)
}

// resumeState reads the state that handOff left in descriptor arg and
// closes it.
func resumeState(arg string) (*idleState, error) {
	var st idleState
	if err := ctlmsg.ReadState(arg, &st); err != nil {
		return nil, fmt.Errorf("resuming the init: %w", err)
	}
	if st.Config == nil || st.Control < 3 || st.Self < 3 || (st.Config.CommandsCgroup && st.Commands < 3) {
		return nil, fmt.Errorf("resuming the init: incomplete idle state")
	}
	return &st, nil
}

// ExecSupervisorHolder replaces this process (a CLI sandbox's supervisor)
// with the supervisor's idle holder: C code, run before any Go runtime,
// that waits until one of the watch descriptors is readable or hung up,
// deadline passes (zero: no deadline), or SIGTERM, SIGINT, SIGHUP or
// SIGCHLD arrives, and then execs this binary with goArgv (argv[0]
// included) and one argument more: the number of the signal that woke it
// (SIGTERM, SIGINT or SIGHUP), else 0. The watch descriptors, and any the
// new image needs, must not be close-on-exec. It returns only when the
// exec failed.
//
// wake, when >= 0, is the sandbox init's control socket (one of watch):
// woken by another watch descriptor, the holder first sends the init a
// wake-up message (ignored by the init), so that an init in its own idle
// holder starts again while the Go supervisor starts, rather than once
// the supervisor forwards the request that woke it.
//
// The calling goroutine must be locked to the OS thread that started the
// sandbox's init (runtime.LockOSThread before provisioning): the init
// asks for SIGKILL when the thread that started it ends, and every other
// thread ends at exec.
func ExecSupervisorHolder(deadline time.Time, watch []int, wake int, goArgv []string) error {
	if !holderAvailable {
		return fmt.Errorf("idle supervisor holder: %w (built without cgo)", errors.ErrUnsupported)
	}
	if len(watch) == 0 || len(watch) > 16 || len(goArgv) == 0 {
		return fmt.Errorf("idle supervisor holder: %d descriptors to watch, %d arguments", len(watch), len(goArgv))
	}
	exe, err := unix.Open("/proc/self/exe", unix.O_PATH, 0) // inherited by the holder
	if err != nil {
		return os.NewSyscallError("open /proc/self/exe", err)
	}
	defer unix.Close(exe)
	ms := "0"
	if !deadline.IsZero() {
		ms = strconv.FormatInt(max(1, deadline.UnixMilli()), 10)
	}
	argv := []string{IdleSupervisorArg0, ms, "-"}
	if wake >= 0 {
		argv[2] = strconv.Itoa(wake)
	}
	for _, fd := range watch {
		argv = append(argv, strconv.Itoa(fd))
	}
	argv = append(append(argv, "--", strconv.Itoa(exe)), goArgv...)
	// The signals the holder waits for are blocked on this thread, whose
	// mask the holder inherits, so that one arriving while the holder
	// starts stays pending for its signalfd: with them unblocked, a
	// SIGTERM in that window met the default action, killing the holder
	// (and the sandbox with it) with its record and cgroup left behind.
	var set, old unix.Sigset_t
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD} {
		set.Val[(sig-1)/64] |= 1 << ((sig - 1) % 64)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return fmt.Errorf("idle supervisor holder: %w", os.NewSyscallError("pthread_sigmask", err))
	}
	err = syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", exe), argv, os.Environ())
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return fmt.Errorf("exec of the idle supervisor holder: %w", err)
}
