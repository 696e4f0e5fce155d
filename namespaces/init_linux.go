package namespaces

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/fs/files"
	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/seccomp"
)

// IdleTrimAfter is how long a long-lived sandbox's init waits without a
// request before trimming its memory (internal/memtrim): an idle init
// then holds about 1 MiB of its own instead of ~12 MiB of mapped binary
// pages, and its next exec faults back the few hundred pages it needs.
const IdleTrimAfter = 3 * time.Second

// initParentReaps, as an init's argv[1], says that its parent is not
// the host side (Options.ParentReaps).
const initParentReaps = "parent-reaps"

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// MaybeRunInit runs the sandbox init and exits when this process is one;
// otherwise it returns at once. Call it (through sandbox.Init) first thing
// in main.
func MaybeRunInit() {
	if len(os.Args) > 0 && os.Args[0] == ExecArg0 {
		os.Exit(runTrampoline())
	}
	if len(os.Args) > 0 && os.Args[0] == files.FileHelperArg0 {
		os.Exit(files.RunFileHelper(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 0 && os.Args[0] == procfsHelperArg0 {
		os.Exit(runProcfsHelper())
	}
	if len(os.Args) > 0 && os.Args[0] == SudoHelperArg0 {
		os.Exit(runSudoHelper())
	}
	if isSudo() {
		os.Exit(runSudo(os.Args[1:]))
	}
	if !IsInit() {
		return
	}
	os.Exit(runInit())
}

// runInit is the init's main. It returns the process exit code.
func runInit() int {
	phases := Phases{Exec: processStartNS(), Entry: Monotonic()}
	// Its commands' OOM score is relative to it (see CommandOOMScoreAdj).
	initOOM.read()
	// Die with the host side; refuse to be ptraced or have /proc/1/mem or
	// /proc/1/exe opened by the sandbox's processes. An init its host's
	// parent reaps (Options.ParentReaps) has that parent's thread for its
	// parent, which is not the host side: it ends with its control
	// socket, as its command killed (the status its parent reaps).
	hostGone := ExitProtocol
	if len(os.Args) == 2 && os.Args[1] == initParentReaps {
		hostGone = 128 + int(unix.SIGKILL)
	} else {
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if os.Getpid() != 1 {
		// In a pod's pid namespace (Options.PIDNamespace), not its PID 1:
		// its commands' orphans come back to it, as to a PID 1, rather
		// than go to the pod's.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	// Whatever the host leaked to us (descriptors without close-on-exec)
	// must never reach the command: only fds 0-2 are passed on.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return ExitProtocol
	}
	// An init exec'd again by its idle holder (see handOff) resumes from
	// the state it left; a new one reads its config from the host.
	var resumed *idleState
	ctlFD := 3
	if len(os.Args) == 3 && os.Args[1] == "resume" {
		var err error
		if resumed, err = resumeState(os.Args[2]); err != nil {
			return ExitProtocol
		}
		ctlFD = resumed.Control
	}
	conn, err := ctlmsg.NewConn(ctlFD, "tent-control")
	if err != nil {
		return ExitProtocol
	}
	defer conn.Close()
	in := &initLoop{hostGone: hostGone, conn: conn, execs: map[int]string{}, hostView: -1, sudo: -1}
	in.chld = make(chan os.Signal, 16)
	if resumed != nil {
		return in.resume(resumed)
	}
	return in.boot(phases)
}

// resume takes up the state an init exec'd again by its idle holder left,
// and serves.
func (in *initLoop) resume(resumed *idleState) int {
	in.cfg, in.hostView = resumed.Config, resumed.HostView
	var progs []seccomp.Program
	if len(in.cfg.Seccomp) > 0 {
		var err error
		if progs, err = seccomp.UnmarshalStack(in.cfg.Seccomp); err != nil {
			return ExitProtocol
		}
	}
	in.sp = newSpawner(in.cfg, progs)
	in.sp.self = resumed.Self
	if in.cfg.CommandsCgroup {
		in.sp.commands = resumed.Commands
	}
	if in.cfg.Sudo {
		in.sudo = resumed.Sudo
	}
	in.catchSignals()
	return in.serve()
}

// boot reads a new init's config from the host, sets the sandbox up,
// starts the one-shot command if there is one, reports ready and serves.
func (in *initLoop) boot(phases Phases) int {
	conn := in.conn
	if err := send(conn, message{Type: msgHello}, nil); err != nil {
		return ExitProtocol
	}
	m, fds, err := recv(conn)
	if err != nil || m.Type != msgConfig || m.Config == nil {
		return ExitProtocol
	}
	cfg := m.Config
	in.cfg = cfg
	phases.Config = Monotonic()
	listeners, stage, err := in.configure(cfg, fds)
	if err != nil {
		return in.fail(stage, err)
	}
	phases.Root = Monotonic()
	ready := message{Type: msgReady}
	if in.oneShot {
		pid, master, stage, err := in.start("", cfg.Exec, [3]int{0, 1, 2}, false)
		if err != nil {
			return in.fail(stage, err)
		}
		ready = message{Type: msgStarted, Pid: pid}
		if master >= 0 {
			ready.TTY = true
			listeners = append(listeners, master)
		}
	}
	phases.Started = Monotonic()
	ready.Stamps = phases.stamps()
	err = send(conn, ready, listeners)
	if ready.TTY {
		listeners = listeners[:len(listeners)-1] // the init keeps its master
	}
	closeAll(listeners) // the host holds them now
	if err != nil {
		return ExitProtocol
	}
	in.catchSignals()
	return in.serve()
}

// fail reports a setup failure at stage to the host and returns the
// init's exit code for it.
func (in *initLoop) fail(stage string, err error) int {
	var errno syscall.Errno
	errors.As(err, &errno)
	_ = send(in.conn, message{Type: msgError, Stage: stage, Error: err.Error(), Errno: int(errno)}, nil)
	return ExitSetupFailed
}

// configure sets the sandbox up as cfg says (fds: the descriptors the
// host sent with it) and returns the proxy's listeners to hand to the
// host; on failure, the stage that failed.
func (in *initLoop) configure(cfg *Config, fds []int) (listeners []int, stage string, err error) {
	commands := -1
	if cfg.CommandsCgroup {
		if len(fds) == 0 {
			return nil, "cgroup", errors.New("the commands' cgroup was not sent")
		}
		commands, fds = fds[len(fds)-1], fds[:len(fds)-1]
	}

	if cfg.HostView {
		if in.hostView, err = fs.SaveHostView(); err != nil {
			return nil, "setup", err
		}
	}
	if err := setup(cfg, fds); err != nil {
		return nil, "setup", err
	}
	if cfg.ProxyListeners {
		if listeners, err = proxyListeners(); err != nil {
			return nil, "proxy", err
		}
		if cfg.Transparent {
			more, err := transparentSockets(cfg.CatchPorts)
			if err != nil {
				closeAll(listeners)
				return nil, "proxy", err
			}
			listeners = append(listeners, more...)
		}
	}
	var progs []seccomp.Program
	if len(cfg.Seccomp) > 0 {
		if progs, err = seccomp.UnmarshalStack(cfg.Seccomp); err != nil {
			return nil, "seccomp", err
		}
	}
	in.sp = newSpawner(cfg, progs)
	in.sp.commands = commands
	in.oneShot = cfg.Exec.Path != ""
	if cfg.Sudo {
		if in.sudo, err = sudoListen(); err != nil {
			closeAll(listeners)
			return nil, "sudo", err
		}
	}
	return listeners, "", nil
}

// catchSignals catches the init's signals from here on, in a goroutine.
// SIGCHLD makes the loop reap; signals for the init itself come only
// through the socket, so the others a host process could send are caught
// and dropped. (Not signal.Ignore: SIG_IGN would be inherited by the
// command across execve; caught signals are reset to default.) A process
// of the sandbox cannot signal its init at all.
//
// It runs once the command has started, not before: the first
// signal.Notify starts the runtime's signal thread, and every signal is a
// round trip to that thread, 0.5-1 ms in all on a busy 2-CPU host that a
// sandbox's start need not wait for. A child that exits before SIGCHLD is
// caught is reaped all the same: the loop is poked once it is.
func (in *initLoop) catchSignals() {
	go func() {
		signal.Notify(in.chld, unix.SIGCHLD)
		select {
		case in.chld <- unix.SIGCHLD:
		default: // a reap is due anyway
		}
		// The Go runtime already ignores the others it handles (SIGUSR1,
		// SIGUSR2, ...) unless they are asked for: these it would die of
		// (HUP, INT, TERM, QUIT) or, having no handler, stop at.
		drop := make(chan os.Signal, 8)
		signal.Notify(drop, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
		for range drop {
		}
	}()
}

// setup builds the sandbox around the init: hostname, loopback, the root
// filesystem, resource limits.
func setup(cfg *Config, fds []int) error {
	defer closeAll(fds)
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fmt.Errorf("setting the hostname: %w", os.NewSyscallError("sethostname", err))
		}
	}
	if cfg.Loopback {
		if err := loopbackUp(LoopbackGSO); err != nil {
			return err
		}
		if cfg.Transparent {
			if err := localRoutes(); err != nil {
				return err
			}
		}
	}
	// Before the new root, whose /proc/sys is read-only.
	if err := netnsSysctls(cfg); err != nil {
		return err
	}
	if err := specSysctls(cfg); err != nil {
		return err
	}
	if cfg.Plan == nil {
		return errors.New("no mount plan")
	}
	if err := cfg.Plan.Apply(fds); err != nil {
		return fmt.Errorf("building the root filesystem: %w", err)
	}
	return nil
}

// proxyListeners listens on 127.0.0.1's proxy ports, in this (the
// sandbox's) network namespace.
func proxyListeners() ([]int, error) {
	var fds []int
	for _, port := range []int{ProxyHTTPPort, ProxySOCKSPort} {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			closeAll(fds)
			return nil, os.NewSyscallError("socket", err)
		}
		fds = append(fds, fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("proxy port %d: %w", port, os.NewSyscallError("bind", err))
		}
		if err := unix.Listen(fd, 1024); err != nil {
			closeAll(fds)
			return nil, os.NewSyscallError("listen", err)
		}
	}
	return fds, nil
}
