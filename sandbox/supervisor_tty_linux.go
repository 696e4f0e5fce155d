package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/netpolicy"
)

// An exec session is a remote exec whose connection stays open both
// ways while the command runs (op "exec-session"): the caller sends the
// request with its stdin, stdout and stderr attached, then an opening
// sessionMsg (the terminal, if any), then any number of sessionMsgs
// (resizes, signals for the command's foreground process group); the
// supervisor answers with one remoteReply when the command has ended.
// The caller going away (its end closed) kills the command's session.
//
// Hook in serveRemote's switch (supervisor_linux.go):
//
//	case opExecSession: serveExecSession(conn, sb, req, files); return

// opExecSession is the remoteRequest.Op of an exec session.
const opExecSession = "exec-session"

// sessionMsg is one message from the caller of an exec session.
type sessionMsg struct {
	// TTY, in the opening message, asks for a terminal of this size.
	TTY *WindowSize `json:"tty,omitempty"`
	// Resize resizes the terminal.
	Resize *WindowSize `json:"resize,omitempty"`
	// Signal is delivered to the command's foreground process group.
	Signal int `json:"signal,omitempty"`
}

// serveExecSession runs an exec session on conn (the request req has
// been read, files are the caller's stdio) and answers it.
func serveExecSession(conn *net.UnixConn, sb *Sandbox, req remoteRequest, files []*os.File) {
	var open sessionMsg
	if len(files) != 3 {
		_ = ctlmsg.Send(conn, remoteReply{Code: 125, Error: "an exec session needs the caller's stdin, stdout and stderr"}, nil)
		return
	}
	if fds, err := ctlmsg.Recv(conn, &open); err != nil {
		return
	} else {
		closeFDs(fds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resize := make(chan WindowSize, 4)
	signals := make(chan os.Signal, 8)
	go func() {
		defer cancel() // the caller is gone: its command goes too
		for {
			var m sessionMsg
			fds, err := ctlmsg.Recv(conn, &m)
			closeFDs(fds)
			if err != nil {
				return
			}
			switch {
			case m.Resize != nil:
				select {
				case resize <- *m.Resize:
				default:
				}
			case m.Signal > 0 && m.Signal < 65:
				select {
				case signals <- syscall.Signal(m.Signal):
				default:
				}
			}
		}
	}()
	er := ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput,
		Stdin: files[0], Stdout: files[1], Stderr: files[2], Signals: signals}
	if open.TTY != nil {
		er.TTY = &Terminal{Size: *open.TTY, Resize: resize}
	}
	before := sb.NetworkDenied()
	res, err := sb.exec(ctx, er, false)
	var reply remoteReply
	if res == nil {
		reply = remoteReply{Code: ExitCode(err), Error: err.Error()}
	} else {
		reply = remoteReply{Result: res, Blocked: netpolicy.Summary(deniedSince(before, sb.NetworkDenied()))}
	}
	_ = ctlmsg.Send(conn, reply, nil)
}

// ExecSession is a running remote exec (see [RemoteExecSession]).
type ExecSession struct {
	conn *net.UnixConn
	id   string // the sandbox's, for errors
}

// RemoteExecSession starts req in the sandbox rec names, through its
// supervisor, with stdio passed as they are (req's readers and writers
// are ignored) — or, with req.TTY, on a terminal inside the sandbox that
// the supervisor connects to stdio[0] and stdio[1] (req.TTY.Resize is
// ignored: call [ExecSession.Resize]). Signals sent with
// [ExecSession.Signal] reach the command's foreground process group.
// Wait for the result with [ExecSession.Wait].
func RemoteExecSession(rec *Record, req ExecRequest, stdio [3]*os.File) (*ExecSession, error) {
	if rec.State != "running" && rec.State != "suspended" {
		return nil, fmt.Errorf("%w: %s is %s, its supervisor is gone (tent rm %s cleans up)", ErrStopped, rec.ID, rec.State, rec.ID)
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: rec.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrStopped, rec.ID, err)
	}
	fds := []int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd())}
	r := remoteRequest{Op: opExecSession, Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput}
	var open sessionMsg
	if req.TTY != nil {
		sz := req.TTY.size()
		open.TTY = &sz
	}
	if err := ctlmsg.Send(conn, r, fds); err != nil {
		conn.Close()
		return nil, err
	}
	if err := ctlmsg.Send(conn, open, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return &ExecSession{conn: conn, id: rec.ID}, nil
}

// Resize resizes the session's terminal.
func (s *ExecSession) Resize(sz WindowSize) error {
	return ctlmsg.Send(s.conn, sessionMsg{Resize: &sz}, nil)
}

// Signal delivers sig to the command's foreground process group (see
// [Cmd.Signal]).
func (s *ExecSession) Signal(sig syscall.Signal) error {
	return ctlmsg.Send(s.conn, sessionMsg{Signal: int(sig)}, nil)
}

// Wait waits for the command's end and closes the session. blocked
// summarises the connections the network policy refused meanwhile.
func (s *ExecSession) Wait() (res *ExecResult, blocked string, err error) {
	defer s.conn.Close()
	var reply remoteReply
	if _, err := ctlmsg.Recv(s.conn, &reply); err != nil {
		return nil, "", fmt.Errorf("sandbox %s: no answer from its supervisor: %w", s.id, err)
	}
	if reply.Result == nil {
		return nil, "", &RemoteError{Code: reply.Code, Msg: reply.Error}
	}
	return reply.Result, reply.Blocked, nil
}

// Close ends the session: the supervisor kills the command's session.
func (s *ExecSession) Close() error { return s.conn.Close() }
