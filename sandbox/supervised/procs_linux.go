package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// Detached commands (Handle.Start: tent exec -d, and tent serve's
// commands) belong to the supervisor, not to the connection that started
// them: the table is the sandbox's own (sandbox.Sandbox.StartProcess),
// kept in the supervisor's process; the caller gets the command's pid and
// goes, and any process of the sandbox's owner finds it again by pid (tent
// ps, tent attach, tent kill, a second Handle: each a client of the
// Process). The supervisor is awake
// while a command runs: one hands off to its idle holder only once none
// does, and the records of finished ones go then.

// serveProc serves a request on one process of the table, answering on
// conn; it reports false for a request that is none. The requests that
// wait (a wait, an output read, a follow) end when the caller goes; a
// stdin write never waits (the table queues it, bounded).
func (s *server) serveProc(conn *net.UnixConn, req request, files []*os.File) bool {
	switch req.Op {
	case opStart, opPs, opProc, opSignal, opResize, opStdin, opCloseStdin, opOutput, opWait, opFollow:
	default:
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if req.Op == opWait || req.Op == opOutput || req.Op == opFollow {
		go func() {
			defer cancel() // the caller is gone
			for {
				var m sessionMsg
				fds, err := ctlmsg.Recv(conn, &m)
				closeFDs(fds)
				if err != nil {
					return
				}
			}
		}()
	}
	var rep reply
	if err := s.doProc(ctx, req, files, &rep); err != nil {
		rep = failure(err)
	}
	_ = ctlmsg.Send(conn, rep, nil)
	return true
}

// doProc runs one process request.
func (s *server) doProc(ctx context.Context, req request, files []*os.File, rep *reply) error {
	sb := s.sb
	switch req.Op {
	case opStart:
		er := sandbox.ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, AsRoot: req.AsRoot, User: req.User}
		if req.TTY != nil {
			er.TTY = &sandbox.Terminal{Size: *req.TTY}
		}
		p, err := sb.StartProcess(ctx, er, sandbox.StartOptions{Tag: req.Tag, Stdin: req.Stdin})
		if err != nil {
			return err
		}
		rep.Pid = p.Pid()
		return nil
	case opPs:
		procs, err := sb.Processes(ctx)
		rep.Procs = procs
		return err
	}
	p, err := sb.Process(ctx, req.Pid)
	if err != nil {
		return err
	}
	switch req.Op {
	case opSignal:
		if req.Signal <= 0 || req.Signal > 64 {
			return fmt.Errorf("%w: signal %d: want 1-64", sandbox.ErrInvalidSpec, req.Signal)
		}
		return p.Signal(ctx, syscall.Signal(req.Signal))
	case opResize:
		if req.TTY == nil {
			return fmt.Errorf("%w: resize needs a size", sandbox.ErrInvalidSpec)
		}
		return p.Resize(ctx, *req.TTY)
	case opStdin:
		return p.WriteStdin(ctx, req.Data)
	case opCloseStdin:
		return p.CloseStdin(ctx)
	case opOutput:
		rctx := ctx
		if req.NoWait {
			c, cancel := context.WithCancel(ctx)
			cancel()
			rctx = c
		}
		out, err := p.ReadOutput(rctx, req.Stream, req.Offset)
		if req.NoWait && err != nil && ctx.Err() == nil && errors.Is(err, rctx.Err()) {
			out, err = sandbox.Output{Offset: req.Offset}, nil // nothing yet
		}
		rep.Output = &out
		return err
	case opWait:
		res, err := p.Wait(ctx)
		rep.Result = res
		return err
	case opFollow:
		return follow(ctx, p, req, files, rep)
	}
	return nil // opProc: it exists
}

// follow writes a detached command's output stream from req.Offset to
// files[0], the caller's pipe, until the stream ends; a write waits while
// the pipe is full, which holds the command back. The caller leaving
// (ctx) or closing its end stops it. A gap (the ring dropped req.Offset)
// is no failure: reply.Output says where the kept output starts.
func follow(ctx context.Context, p sandbox.Process, req request, files []*os.File, rep *reply) error {
	if len(files) != 1 {
		return fmt.Errorf("%w: a follow needs the caller's output (one descriptor)", sandbox.ErrInvalidSpec)
	}
	f := files[0]
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(aLongTimeAgo) })
	defer stop()
	end, err := p.Follow(ctx, req.Stream, req.Offset, f)
	if errors.Is(err, sandbox.ErrOutputDropped) {
		rep.Output = &sandbox.Output{Offset: end, Dropped: end - req.Offset}
		return nil
	}
	if err != nil {
		return err
	}
	rep.Output = &sandbox.Output{Offset: end, End: true}
	return nil
}
