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
	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/seccomp"
)

// IdleTrimAfter is how long a long-lived sandbox's init waits without a
// request before trimming its memory (internal/memtrim): an idle init
// then holds about 1 MiB of its own instead of ~12 MiB of mapped binary
// pages, and its next exec faults back the few hundred pages it needs.
const IdleTrimAfter = 3 * time.Second

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// MaybeRunInit runs the sandbox init and exits when this process is one;
// otherwise it returns at once. Call it (through sandbox.Init) first thing
// in main.
func MaybeRunInit() {
	if len(os.Args) > 0 && os.Args[0] == ExecArg0 {
		os.Exit(runTrampoline())
	}
	if len(os.Args) > 0 && os.Args[0] == fs.FileHelperArg0 {
		os.Exit(fs.RunFileHelper(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
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
	// While this process's /proc files are still its own (see
	// CommandOOMScoreAdj).
	initOOM.open()
	// Die with the host side; refuse to be ptraced or have /proc/1/mem or
	// /proc/1/exe opened by the sandbox's processes.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
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
	in := &initLoop{conn: conn, execs: map[int]string{}, hostView: -1, sudo: -1}
	in.chld = make(chan os.Signal, 16)

	if resumed != nil {
		in.cfg, in.hostView = resumed.Config, resumed.HostView
		var prog seccomp.Program
		if len(in.cfg.Seccomp) > 0 {
			if prog, err = seccomp.UnmarshalProgram(in.cfg.Seccomp); err != nil {
				return ExitProtocol
			}
		}
		in.sp = newSpawner(in.cfg, prog)
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
	fail := func(stage string, err error) int {
		var errno syscall.Errno
		errors.As(err, &errno)
		_ = send(conn, message{Type: msgError, Stage: stage, Error: err.Error(), Errno: int(errno)}, nil)
		return ExitSetupFailed
	}
	commands := -1
	if cfg.CommandsCgroup {
		if len(fds) == 0 {
			return fail("cgroup", errors.New("the commands' cgroup was not sent"))
		}
		commands, fds = fds[len(fds)-1], fds[:len(fds)-1]
	}

	if cfg.HostView {
		if in.hostView, err = fs.SaveHostView(); err != nil {
			return fail("setup", err)
		}
	}
	if err := setup(cfg, fds); err != nil {
		return fail("setup", err)
	}
	var listeners []int
	if cfg.ProxyListeners {
		if listeners, err = proxyListeners(); err != nil {
			return fail("proxy", err)
		}
		if cfg.Transparent {
			more, err := transparentSockets(cfg.CatchPorts)
			if err != nil {
				closeAll(listeners)
				return fail("proxy", err)
			}
			listeners = append(listeners, more...)
		}
	}
	var prog seccomp.Program
	if len(cfg.Seccomp) > 0 {
		if prog, err = seccomp.UnmarshalProgram(cfg.Seccomp); err != nil {
			return fail("seccomp", err)
		}
	}
	in.sp = newSpawner(cfg, prog)
	in.sp.commands = commands
	in.oneShot = cfg.Exec.Path != ""
	if cfg.Sudo {
		if in.sudo, err = sudoListen(); err != nil {
			closeAll(listeners)
			return fail("sudo", err)
		}
	}
	phases.Root = Monotonic()
	ready := message{Type: msgReady}
	if in.oneShot {
		pid, master, stage, err := in.start("", cfg.Exec, [3]int{0, 1, 2}, false)
		if err != nil {
			return fail(stage, err)
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

// initLoop is a running init's state between requests.
type initLoop struct {
	conn     *os.File
	cfg      *Config
	sp       *spawner
	hostView int // fs.SaveHostView's descriptor, or -1
	chld     chan os.Signal
	// execs maps the pids of running commands to their exec ids; the
	// one-shot command has the empty id and its exit ends the init.
	execs map[int]string
	// ttys maps the pids of commands started on a terminal (Exec.TTY)
	// to the init's copy of its master, kept to find the terminal's
	// foreground process group for signals and closed when the command
	// exits.
	ttys    map[int]int
	oneShot bool
	// sudo is the listening socket of Config.Sudo (-1 without), sudoPid
	// the running sudo helper's pid (0: none), and sudoWake fires when a
	// connection waits while none runs (see watchSudo).
	sudo     int
	sudoPid  int
	sudoWake chan struct{}
	sudoArm  chan struct{}
}

// start spawns e under id: on a new terminal when e.TTY is set (stdio is
// then unused), and returns its pid and the terminal's master (-1
// without), which the init keeps until the command exits.
func (in *initLoop) start(id string, e Exec, stdio [3]int, reuse bool) (pid, master int, stage string, err error) {
	master = -1
	if e.TTY != nil {
		var peer int
		if master, peer, err = openPTY(*e.TTY); err != nil {
			return 0, -1, "tty", err
		}
		defer unix.Close(peer)
		stdio = [3]int{peer, peer, peer}
	}
	pid, stage, err = in.sp.spawn(e, stdio, reuse)
	if err != nil {
		if master >= 0 {
			unix.Close(master)
		}
		return 0, -1, stage, err
	}
	in.execs[pid] = id
	if master >= 0 {
		if in.ttys == nil {
			in.ttys = map[int]int{}
		}
		in.ttys[pid] = master
	}
	return pid, master, "", nil
}

// masterOf returns the init's copy of pid's terminal master, or -1.
func (in *initLoop) masterOf(pid int) int {
	if m, ok := in.ttys[pid]; ok {
		return m
	}
	return -1
}

// control is one result of reading the control socket.
type control struct {
	m   message
	fds []int
	err error
}

// serve handles control messages and children until the host goes away
// (or the one-shot command exits), and returns the exit code.
func (in *initLoop) serve() int {
	// The socket is read by a goroutine, one message at a time when asked
	// (next), so that at any moment the loop knows whether a read is under
	// way: handing off to the idle holder needs none to be.
	next := make(chan struct{}, 1)
	ctl := make(chan control)
	go func() {
		for range next {
			m, fds, err := recv(in.conn)
			ctl <- control{m, fds, err}
		}
	}()
	defer close(next)
	next <- struct{}{}
	if in.sudo >= 0 {
		in.sudoWake, in.sudoArm = make(chan struct{}), make(chan struct{}, 1)
		go watchSudo(in.sudo, in.sudoArm, in.sudoWake)
		defer close(in.sudoArm)
		in.sudoArm <- struct{}{}
	}
	// A child may have exited before SIGCHLD was caught (a resumed init).
	in.reap()
	// An init that has had nothing to do for IdleTrimAfter trims its
	// memory; one idle for the hand-off delay, with no command running,
	// hands the sandbox to the idle holder.
	idle := NewIdleTimer(in.cfg.IdleAfter, !in.oneShot)
	defer idle.Stop()
	for {
		select {
		case <-in.sudoWake:
			idle.Reset()
			in.startSudoHelper()
		case <-idle.C:
			if !idle.Fired(len(in.execs) > 0 || in.sudoPid != 0) {
				continue
			}
			// Stop the pending read without losing a message: with a
			// deadline in the past it returns at once, unless it already
			// holds a message (handled below, as usual). A packet is
			// read whole or not at all.
			_ = in.conn.SetReadDeadline(time.Unix(1, 0))
			c := <-ctl
			_ = in.conn.SetReadDeadline(time.Time{})
			if errors.Is(c.err, os.ErrDeadlineExceeded) {
				_ = handOff(in.conn, in.cfg, in.hostView, in.sudo, in.sp) // returns only on failure
				idle.HandOffFailed()
				next <- struct{}{}
				continue
			}
			idle.Reset()
			if code, done := in.handle(c); done {
				return code
			}
			next <- struct{}{}
		case c := <-ctl:
			idle.Reset()
			if code, done := in.handle(c); done {
				return code
			}
			next <- struct{}{}
		case <-in.chld:
			if in.reap() {
				return 0
			}
			if len(in.execs) == 0 && in.sudoPid == 0 {
				idle.Reset()
			}
		}
	}
}

// reap waits for every exited child: PID 1 reaps every orphan, and an
// exec's own status is reported. It reports whether the one-shot command
// has exited.
func (in *initLoop) reap() bool {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil || wpid <= 0 {
			return false
		}
		if wpid == in.sudoPid && in.sudoPid != 0 {
			in.sudoPid = 0
			in.sudoArm <- struct{}{}
			continue
		}
		id, ok := in.execs[wpid]
		if !ok {
			continue
		}
		delete(in.execs, wpid)
		if m, ok := in.ttys[wpid]; ok {
			unix.Close(m)
			delete(in.ttys, wpid)
		}
		_ = send(in.conn, message{Type: msgExit, ID: id, Status: uint32(ws)}, nil)
		if in.oneShot && id == "" {
			return true
		}
	}
}

// pidOf returns the pid of the running exec id, or 0.
func (in *initLoop) pidOf(id string) int {
	for pid, e := range in.execs {
		if e == id {
			return pid
		}
	}
	return 0
}

// handle carries out one control message. done means the init must exit
// with code (the host is gone).
func (in *initLoop) handle(c control) (code int, done bool) {
	if c.err != nil {
		return ExitProtocol, true // the host is gone: take everything down
	}
	conn, m := in.conn, c.m
	switch m.Type {
	case msgExec:
		wantFDs := 3
		if m.Exec != nil && m.Exec.TTY != nil {
			wantFDs = 0
		}
		if len(c.fds) != wantFDs || m.Exec == nil || m.ID == "" || in.pidOf(m.ID) != 0 {
			closeAll(c.fds)
			_ = send(conn, message{Type: msgError, ID: m.ID, Stage: "protocol", Error: "an exec needs an unused id, a command and 3 descriptors (none with a terminal)"}, nil)
			return 0, false
		}
		var stdio [3]int
		copy(stdio[:], c.fds)
		pid, master, stage, err := in.start(m.ID, *m.Exec, stdio, true)
		closeAll(c.fds)
		if err != nil {
			var errno syscall.Errno
			errors.As(err, &errno)
			_ = send(conn, message{Type: msgError, ID: m.ID, Stage: stage, Error: err.Error(), Errno: int(errno)}, nil)
			return 0, false
		}
		started := message{Type: msgStarted, ID: m.ID, Pid: pid}
		var fds []int
		if master >= 0 {
			started.TTY, fds = true, []int{master}
		}
		_ = send(conn, started, fds)
	case msgAttach:
		var err error
		if m.Attach == nil || m.ID == "" {
			err = errors.New("an attach needs an id and a step")
		} else {
			err = fs.AttachSteps(in.hostView, append([]fs.Step{m.Attach.Step}, m.Attach.Guards...), c.fds)
		}
		closeAll(c.fds)
		if err != nil {
			var errno syscall.Errno
			errors.As(err, &errno)
			_ = send(conn, message{Type: msgError, ID: m.ID, Stage: "attach", Error: err.Error(), Errno: int(errno)}, nil)
			return 0, false
		}
		if len(m.Attach.Rules) > 0 {
			in.cfg.LandlockRules = append(in.cfg.LandlockRules, m.Attach.Rules...)
			in.sp.rulesChanged()
		}
		_ = send(conn, message{Type: msgDone, ID: m.ID}, nil)
	case msgListen, msgDial:
		closeAll(c.fds)
		var fds []int
		var err error
		if m.Type == msgListen {
			if !in.cfg.Transparent {
				err = errors.New("the sandbox catches no connections")
			} else if fds, err = catchListeners(m.Ports); err == nil {
				in.cfg.CatchPorts = append(in.cfg.CatchPorts, m.Ports...)
			}
		} else {
			var fd int
			if fd, err = dialLocal(m.Port, m.V6); err == nil {
				fds = []int{fd}
			}
		}
		if err != nil {
			var errno syscall.Errno
			errors.As(err, &errno)
			_ = send(conn, message{Type: msgError, ID: m.ID, Stage: m.Type, Error: err.Error(), Errno: int(errno)}, nil)
			return 0, false
		}
		_ = send(conn, message{Type: msgDone, ID: m.ID}, fds)
		closeAll(fds) // the host holds them now
	case msgSignal:
		closeAll(c.fds)
		if pid := in.pidOf(m.ID); pid != 0 {
			signalForeground(pid, in.masterOf(pid), syscall.Signal(m.Signal))
		}
	case msgKill:
		closeAll(c.fds)
		// The exec's session: itself and every process group in it (a
		// shell's jobs). Descendants that started their own session
		// are only reached by terminating the sandbox.
		if pid := in.pidOf(m.ID); pid != 0 {
			killSession(pid)
		}
	default:
		closeAll(c.fds)
	}
	return 0, false
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
