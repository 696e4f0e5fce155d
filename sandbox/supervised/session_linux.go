package supervised

import (
	"context"
	"net"
	"os"
	"syscall"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// An exec is a session whose connection stays open both ways while the
// command runs: the caller sends the request with its stdin, stdout and
// stderr attached, then an opening sessionMsg (the terminal, if any),
// then any number of sessionMsgs (resizes, signals for the command's
// foreground process group); the supervisor answers with one reply when
// the command has ended. The caller going away (its end closed) kills the
// command's session.

// sessionMsg is one message from the caller of an exec.
type sessionMsg struct {
	// TTY, in the opening message, asks for a terminal of this size.
	TTY *sandbox.WindowSize `json:"tty,omitempty"`
	// Resize resizes the terminal.
	Resize *sandbox.WindowSize `json:"resize,omitempty"`
	// Signal is delivered to the command's foreground process group.
	Signal int `json:"signal,omitempty"`
}

// serveExec runs an exec on conn (req has been read, files are the
// caller's stdio) and answers it.
func serveExec(conn *net.UnixConn, sb *sandbox.Sandbox, req request, files []*os.File) {
	if len(files) != 3 {
		_ = ctlmsg.Send(conn, reply{Code: 125, Kind: "invalid", Error: "an exec needs the caller's stdin, stdout and stderr"}, nil)
		return
	}
	var open sessionMsg
	fds, err := ctlmsg.Recv(conn, &open)
	if err != nil {
		return
	}
	closeFDs(fds)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resize := make(chan sandbox.WindowSize, 4)
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
	er := sandbox.ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput, AsRoot: req.AsRoot, User: req.User,
		Stdin: files[0], Stdout: files[1], Stderr: files[2], Signals: signals}
	if open.TTY != nil {
		er.TTY = &sandbox.Terminal{Size: *open.TTY, Resize: resize}
	}
	res, err := sb.Exec(ctx, er)
	rep := reply{Result: res}
	if res == nil {
		rep = failure(err)
	}
	_ = ctlmsg.Send(conn, rep, nil)
}
