package namespaces

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// ErrInitGone is returned for execs of a sandbox whose init has ended.
var ErrInitGone = errors.New("the sandbox's init is gone")

// ExecExit is how one exec of a long-lived sandbox ended.
type ExecExit struct {
	Status syscall.WaitStatus
	// Err is set when the init ended before reporting the exit.
	Err error
}

type execWait struct {
	started chan message
	exit    chan ExecExit
}

// Serve dispatches the init's reports to the execs waiting for them. Call
// it once, in its own goroutine, after [Init.Run] of a config without a
// command; it returns when the control socket closes.
func (i *Init) Serve() {
	for {
		m, extra, err := recv(i.conn)
		m.tty = -1
		if err == nil && m.Type == msgStarted && m.TTY && len(extra) == 1 {
			m.tty, extra = extra[0], nil
		}
		if err == nil && m.Type == msgDone {
			m.fds, extra = extra, nil
		}
		closeAll(extra)
		if err != nil {
			// The init closed it (as it exited): say how it ended. (A
			// socket this side closed needs no peek.)
			end := ""
			if errors.Is(err, ctlmsg.ErrClosed) {
				end = peekEnd(i.pid)
			}
			i.mu.Lock()
			if end != "" {
				i.deadErr = fmt.Errorf("%w (%s): %v", ErrInitGone, end, err)
			} else {
				i.deadErr = fmt.Errorf("%w: %v", ErrInitGone, err)
			}
			for id, w := range i.waits {
				if w.started != nil {
					w.started <- message{Type: msgError, ID: id, Stage: "init", Error: i.deadErr.Error()}
				}
				w.exit <- ExecExit{Err: i.deadErr}
				delete(i.waits, id)
			}
			i.mu.Unlock()
			return
		}
		i.mu.Lock()
		w := i.waits[m.ID]
		if m.tty >= 0 && (w == nil || w.started == nil) {
			closeAll([]int{m.tty})
		}
		if len(m.fds) > 0 && (w == nil || w.started == nil) {
			closeAll(m.fds)
		}
		switch {
		case w == nil:
			i.log.Debug("control message for no exec", "type", m.Type, "id", m.ID)
		case m.Type == msgStarted && w.started != nil:
			w.started <- m
			w.started = nil
		case m.Type == msgDone && w.started != nil:
			w.started <- m
			delete(i.waits, m.ID)
		case m.Type == msgError && w.started != nil:
			w.started <- m
			delete(i.waits, m.ID)
		case m.Type == msgExit:
			w.exit <- ExecExit{Status: syscall.WaitStatus(m.Status)}
			delete(i.waits, m.ID)
		}
		i.mu.Unlock()
	}
}

// Exec starts e in the sandbox under the unique id with stdio as its fds
// 0, 1 and 2 (the caller keeps ownership), or, with e.TTY, on a new
// terminal of the sandbox (stdio is then not sent). It returns the pid
// inside, the terminal's master (nil without e.TTY; the caller owns and
// closes it) and a channel that receives the exit once.
func (i *Init) Exec(id string, e Exec, stdio [3]int) (int, *os.File, <-chan ExecExit, error) {
	w := &execWait{started: make(chan message, 1), exit: make(chan ExecExit, 1)}
	i.mu.Lock()
	switch {
	case i.deadErr != nil:
		i.mu.Unlock()
		return 0, nil, nil, i.deadErr
	case i.waits == nil:
		i.waits = map[string]*execWait{}
	}
	if _, dup := i.waits[id]; dup {
		i.mu.Unlock()
		return 0, nil, nil, fmt.Errorf("exec id %q is in use", id)
	}
	i.waits[id] = w
	started := w.started
	i.mu.Unlock()
	fds := stdio[:]
	if e.TTY != nil {
		fds = nil
	}
	if err := i.send(message{Type: msgExec, ID: id, Exec: &e}, fds); err != nil {
		i.mu.Lock()
		delete(i.waits, id)
		i.mu.Unlock()
		return 0, nil, nil, err
	}
	m := <-started
	if m.Type == msgError {
		return 0, nil, nil, &StartError{Stage: m.Stage, Msg: m.Error, Errno: syscall.Errno(m.Errno)}
	}
	var tty *os.File
	if m.TTY && m.tty >= 0 {
		tty = os.NewFile(uintptr(m.tty), "tent-tty-master")
	}
	if e.TTY != nil && tty == nil {
		_ = i.KillExec(id)
		<-w.exit
		return 0, nil, nil, errors.New("sandbox init: no terminal for the command")
	}
	return m.Pid, tty, w.exit, nil
}

// SignalExec sends sig to the exec id's foreground process group: its
// terminal's (Exec.TTY), else the process group the command leads (see
// the package doc).
func (i *Init) SignalExec(id string, sig syscall.Signal) error {
	return i.send(message{Type: msgSignal, ID: id, Signal: int(sig)}, nil)
}

// KillExec SIGKILLs the exec id and every process of its session.
func (i *Init) KillExec(id string) error {
	return i.send(message{Type: msgKill, ID: id}, nil)
}

// Attach asks the init to mount a.Step into the running sandbox, with fds
// as the step's pre-opened descriptors (the caller keeps them), and waits
// for the outcome. id must not collide with an exec's.
func (i *Init) Attach(id string, a Attach, fds []int) error {
	got, err := i.request(message{Type: msgAttach, ID: id, Attach: &a}, fds)
	closeAll(got)
	return err
}

// Listen asks the init of a sandbox started with Config.Transparent to
// catch more ports, and returns a listening socket per port (close-on-exec,
// owned by the caller), in the order of ports. id must not collide with an
// exec's.
func (i *Init) Listen(id string, ports []int) ([]int, error) {
	fds, err := i.request(message{Type: msgListen, ID: id, Ports: ports}, nil)
	if err == nil && len(fds) != len(ports) {
		closeAll(fds)
		return nil, fmt.Errorf("sandbox init: %d listeners for %d ports", len(fds), len(ports))
	}
	return fds, err
}

// Dial asks the init for a TCP connection to port on the sandbox's own
// loopback (127.0.0.1, or ::1 with v6), made in its network namespace. The
// socket comes back non-blocking and possibly still connecting: a refusal
// shows in its SO_ERROR. It is close-on-exec and owned by the caller. id
// must not collide with an exec's.
func (i *Init) Dial(id string, port int, v6 bool) (int, error) {
	fds, err := i.request(message{Type: msgDial, ID: id, Port: port, V6: v6}, nil)
	if err != nil {
		return -1, err
	}
	if len(fds) != 1 {
		closeAll(fds)
		return -1, fmt.Errorf("sandbox init: %d descriptors for a connection", len(fds))
	}
	return fds[0], nil
}

// request sends m (a request with an id that gets "done" or "error"),
// with fds attached (the caller keeps them), and returns the descriptors
// of the answer.
func (i *Init) request(m message, fds []int) ([]int, error) {
	w := &execWait{started: make(chan message, 1), exit: make(chan ExecExit, 1)}
	i.mu.Lock()
	switch {
	case i.deadErr != nil:
		i.mu.Unlock()
		return nil, i.deadErr
	case i.waits == nil:
		i.waits = map[string]*execWait{}
	}
	if _, dup := i.waits[m.ID]; dup {
		i.mu.Unlock()
		return nil, fmt.Errorf("request id %q is in use", m.ID)
	}
	i.waits[m.ID] = w
	i.mu.Unlock()
	if err := i.send(m, fds); err != nil {
		i.mu.Lock()
		delete(i.waits, m.ID)
		i.mu.Unlock()
		return nil, err
	}
	a := <-w.started
	if a.Type == msgError {
		return nil, &StartError{Stage: a.Stage, Msg: a.Error, Errno: syscall.Errno(a.Errno)}
	}
	return a.fds, nil
}

// si_code values of SIGCHLD (the kernel's CLD_EXITED ...).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// peekEnd describes how pid, a child of this process, ended ("signal:
// killed"), without reaping it (WNOWAIT: its waiter still does), waiting
// 100 ms at most for it to end: the init closes its control socket as it
// exits. It returns "" for a child still running, or one already reaped,
// or a process that is not this one's child (an init its host's parent
// reaps).
func peekEnd(pid int) string {
	for range 20 {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return ""
		}
		if info.Signo == int32(unix.SIGCHLD) {
			// The SIGCHLD fields after signo, errno and code: pid, uid,
			// status (the union is pointer-aligned).
			ptr := unsafe.Sizeof(uintptr(0))
			off := (12 + ptr - 1) &^ (ptr - 1)
			status := *(*int32)(unsafe.Add(unsafe.Pointer(&info), off+8))
			switch info.Code { // as wait4 would have reported it
			case cldExited:
				return describeStatus(syscall.WaitStatus(status&0xff) << 8)
			case cldKilled:
				return describeStatus(syscall.WaitStatus(status & 0x7f))
			case cldDumped:
				return describeStatus(syscall.WaitStatus(status&0x7f | 0x80))
			}
			return ""
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ""
}
