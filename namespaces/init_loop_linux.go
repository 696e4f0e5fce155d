package namespaces

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

// initLoop is a running init's state between requests.
type initLoop struct {
	// hostGone is the exit status when the host side is gone:
	// ExitProtocol, or for an init its host's parent reaps
	// (Options.ParentReaps) 128+SIGKILL, the container's process's end.
	hostGone int
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
		return in.hostGone, true // the host is gone: take everything down
	}
	conn, m := in.conn, c.m
	switch m.Type {
	case msgQuit:
		// The host side ends the sandbox: this process's exit (the
		// kernel then kills the rest of its pid namespace) carries the
		// status its parent reaps (see Init.Quit).
		closeAll(c.fds)
		return int(m.Status & 0xff), true
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
