package supervised

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// Start starts req as a command the sandbox's supervisor owns and
// returns it at once (see [sandbox.Handle.Start]): it outlives the
// caller, and any process of the sandbox's owner finds it by pid.
func (s *Sandbox) Start(ctx context.Context, req sandbox.ExecRequest, o sandbox.StartOptions) (sandbox.Process, error) {
	if req.Stdin != nil || req.Stdout != nil || req.Stderr != nil || req.Signals != nil || (req.TTY != nil && req.TTY.Resize != nil) {
		return nil, fmt.Errorf("%w: a process owns its stdio: write its stdin with WriteStdin (StartOptions.Stdin), read its output with ReadOutput, resize and signal it through the Process", sandbox.ErrInvalidSpec)
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return nil, fmt.Errorf("%w: exec needs a command", sandbox.ErrInvalidSpec)
	}
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	r := request{Op: opStart, Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, AsRoot: req.AsRoot, User: req.User, Tag: o.Tag, Stdin: o.Stdin}
	if req.TTY != nil {
		sz := req.TTY.Size
		if sz.Rows == 0 {
			sz.Rows = 24
		}
		if sz.Cols == 0 {
			sz.Cols = 80
		}
		r.TTY = &sz
	}
	rep, err := call(ctx, rec, r, nil)
	if err != nil {
		return nil, err
	}
	return &remoteProc{s: s, pid: rep.Pid}, nil
}

// Process finds the detached command pid (see [sandbox.Handle.Process]).
func (s *Sandbox) Process(ctx context.Context, pid int) (sandbox.Process, error) {
	p := &remoteProc{s: s, pid: pid}
	if _, err := p.call(ctx, request{Op: opProc}); err != nil {
		return nil, err
	}
	return p, nil
}

// remoteProc is a detached command of a supervised sandbox: each call is
// one request to its supervisor, which holds the command.
type remoteProc struct {
	s   *Sandbox
	pid int
}

var _ sandbox.Process = (*remoteProc)(nil)

// maxStdinWrite bounds one stdin request's data: a request is one
// message on a SOCK_SEQPACKET socket, which its send buffer bounds (208
// KiB by default), and JSON writes bytes in base64.
const maxStdinWrite = 64 << 10

func (p *remoteProc) call(ctx context.Context, r request) (reply, error) {
	rec, err := p.s.dialRec()
	if err != nil {
		return reply{}, err
	}
	r.Pid = p.pid
	return call(ctx, rec, r, nil)
}

func (p *remoteProc) Pid() int { return p.pid }

func (p *remoteProc) Wait(ctx context.Context) (*sandbox.ExecResult, error) {
	rep, err := p.call(ctx, request{Op: opWait})
	if err != nil {
		return nil, err
	}
	return rep.Result, nil
}

func (p *remoteProc) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.call(ctx, request{Op: opSignal, Signal: int(sig)})
	return err
}

func (p *remoteProc) Resize(ctx context.Context, sz sandbox.WindowSize) error {
	_, err := p.call(ctx, request{Op: opResize, TTY: &sz})
	return err
}

func (p *remoteProc) WriteStdin(ctx context.Context, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), maxStdinWrite)
		if _, err := p.call(ctx, request{Op: opStdin, Data: b[:n]}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (p *remoteProc) CloseStdin(ctx context.Context) error {
	_, err := p.call(ctx, request{Op: opCloseStdin})
	return err
}

// noWaitAnswer bounds the exchange of a read that asks for no wait (its
// caller's ctx has ended): the supervisor answers from its ring at once.
const noWaitAnswer = 10 * time.Second

func (p *remoteProc) ReadOutput(ctx context.Context, fd int, off int64) (sandbox.Output, error) {
	r := request{Op: opOutput, Stream: fd, Offset: off}
	cctx := ctx
	if ctx.Err() != nil {
		// What is there now (see sandbox.Process.ReadOutput): asked
		// for under a bound of its own, as the caller's ctx has ended.
		r.NoWait = true
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), noWaitAnswer)
		defer cancel()
	}
	rep, err := p.call(cctx, r)
	if err != nil {
		return sandbox.Output{}, err
	}
	if rep.Output == nil {
		return sandbox.Output{}, fmt.Errorf("sandbox %s: its supervisor answered an output read without output", p.s.id)
	}
	if r.NoWait && len(rep.Output.Data) == 0 && !rep.Output.End && rep.Output.Dropped == 0 {
		return sandbox.Output{}, ctx.Err()
	}
	return *rep.Output, nil
}

// Follow writes the command's output stream fd from off to w (see
// [sandbox.Process.Follow]): the supervisor writes it into a pipe passed
// with the request, which this copies into w; while w is slow, the pipe
// fills and the supervisor's write waits, which holds the command back.
// ctx's end closes the request and the pipe: the supervisor's follow
// ends with it.
func (p *remoteProc) Follow(ctx context.Context, fd int, off int64, w io.Writer) (int64, error) {
	if err := ctx.Err(); err != nil {
		return off, err
	}
	rec, err := p.s.dialRec()
	if err != nil {
		return off, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return off, err
	}
	defer pr.Close()
	conn, err := dial(rec)
	if err != nil {
		pw.Close()
		return off, err
	}
	defer conn.Close()
	err = ctlmsg.Send(conn, request{Op: opFollow, Pid: p.pid, Stream: fd, Offset: off}, []int{int(pw.Fd())})
	pw.Close() // the supervisor holds its own
	if err != nil {
		return off, err
	}
	stop := context.AfterFunc(ctx, func() {
		_ = pr.SetReadDeadline(aLongTimeAgo)
		_ = conn.SetDeadline(aLongTimeAgo)
	})
	defer stop()
	end, err := copyCounted(w, pr, off)
	if err != nil {
		return end, ctxErr(ctx, rec, err)
	}
	var rep reply
	fds, err := ctlmsg.Recv(conn, &rep)
	ctlmsg.Close(fds)
	switch {
	case err != nil:
		return end, ctxErr(ctx, rec, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, err))
	case rep.Error != "":
		return end, remoteError(rep)
	case rep.Output == nil:
		return end, fmt.Errorf("sandbox %s: its supervisor answered a follow without its end", rec.ID)
	case rep.Output.Dropped > 0 && end == off:
		return rep.Output.Offset, fmt.Errorf("%w: %d bytes of stream %d from offset %d", sandbox.ErrOutputDropped, rep.Output.Dropped, fd, off)
	case rep.Output.Offset != end:
		return end, fmt.Errorf("sandbox %s: its supervisor followed stream %d to offset %d, but %d arrived", rec.ID, fd, rep.Output.Offset, end)
	}
	return end, nil
}

// copyCounted copies r into w until r's end, and returns off plus what w
// took.
func copyCounted(w io.Writer, r io.Reader, off int64) (int64, error) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			k, werr := w.Write(buf[:n])
			off += int64(k)
			if werr == nil && k < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return off, werr
			}
		}
		if errors.Is(rerr, io.EOF) {
			return off, nil
		}
		if rerr != nil {
			return off, rerr
		}
	}
}

// Processes lists the sandbox's detached commands, running and finished,
// oldest first.
func (s *Sandbox) Processes(ctx context.Context) ([]ProcessInfo, error) {
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	rep, err := call(ctx, rec, request{Op: opPs}, nil)
	if err != nil {
		return nil, err
	}
	return rep.Procs, nil
}
