package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// cmd is what the handler keeps of one of the sandbox's commands beyond
// its [sandbox.Process], which the sandbox holds (pid, stdin, output,
// exit): what E2B's protocol needs and the Process does not say. Its
// fields after pty are guarded by the box's mu.
type cmd struct {
	pid int
	// config is the command as its client gave it (List echoes it: the
	// environment and the working directory as asked, /bin/bash where
	// /bin/sh ran), tag its E2B tag, pty whether its output is a
	// terminal's (E2B's pty events, pty input).
	config *processpb.ProcessConfig
	tag    *string
	pty    bool

	// sent is how far into each stream (stdout, stderr; a terminal's is
	// all on stdout) some client was sent the output: where the next
	// Connect starts, so that it gets what no client got.
	sent [2]int64
	// subs counts the clients following it; collected is set once one
	// was sent its end: from then on it is not found, as in envd (the
	// SDK's kill() after wait() says false).
	subs      int
	collected bool
	seq       uint64 // when it was recorded (box.seq)
}

// cmdOf describes a command the handler did not start (an earlier
// handler's, tent exec -d's) from its ProcessInfo.
func cmdOf(pi sandbox.ProcessInfo) *cmd {
	// Its clients (of an earlier server) were sent what any reader took:
	// a Connect gets only the rest, as it would from the server that
	// started it.
	c := &cmd{pid: pi.Pid, pty: pi.TTY, config: &processpb.ProcessConfig{}, sent: pi.Taken}
	if len(pi.Args) > 0 {
		c.config.Cmd, c.config.Args = pi.Args[0], pi.Args[1:]
	}
	if pi.Dir != "" {
		c.config.Cwd = &pi.Dir
	}
	if pi.Tag != "" {
		c.tag = &pi.Tag
	}
	return c
}

// errSandboxGone ends the stream of a command whose sandbox was killed,
// or reached its end, while it ran.
func errSandboxGone() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the sandbox was killed or reached its end of life while the command ran"))
}

// errNotFound is E2B's answer for a process that is not there.
func errNotFound(what string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", what))
}

// piece is one read of a command's output stream fd: data, a gap
// (Dropped), its end, or a failure.
type piece struct {
	fd  int
	out sandbox.Output
	err error
}

// readStream follows p's output stream fd from off into ch until it
// ends, the follow fails or ctx ends. It follows as an attached reader
// (Process.Follow): each piece waits until the client's stream took the
// one before, so a slow client holds the command back, as a pipe does,
// and loses nothing; a gap (output dropped while no client followed) is a
// piece of its own, after which it follows on from the oldest kept.
func readStream(ctx context.Context, p sandbox.Process, fd int, off int64, ch chan<- piece) {
	w := &pieceWriter{ctx: ctx, fd: fd, off: off, ch: ch}
	for {
		end, err := p.Follow(ctx, fd, w.off, w)
		pc := piece{fd: fd, out: sandbox.Output{Offset: end}}
		switch {
		case errors.Is(err, sandbox.ErrOutputDropped):
			pc.out.Dropped = end - w.off
			w.off = end
		case err != nil:
			pc.err = err
		default:
			pc.out.End = true
		}
		select {
		case ch <- pc:
		case <-ctx.Done():
			return
		}
		if pc.err != nil || pc.out.End {
			return
		}
	}
}

// pieceWriter hands what Follow writes to the client's stream, a piece
// at a time, with its offset.
type pieceWriter struct {
	ctx context.Context
	fd  int
	off int64
	ch  chan<- piece
}

func (w *pieceWriter) Write(b []byte) (int, error) {
	select {
	case w.ch <- piece{fd: w.fd, out: sandbox.Output{Data: bytes.Clone(b), Offset: w.off}}:
		w.off += int64(len(b))
		return len(b), nil
	case <-w.ctx.Done():
		return 0, w.ctx.Err()
	}
}

// follow sends c's output from offsets from (stdout, stderr), then its
// end, through send. It returns when the end was sent, when send fails,
// when ctx ends (the client is gone: the command goes on) or when the
// box is forgotten; with keepalive > 0 it sends a keepalive event after
// that long without another.
func (bx *box) follow(ctx context.Context, c *cmd, p sandbox.Process, from [2]int64, send func(*processpb.ProcessEvent) error, keepalive time.Duration) error {
	bx.mu.Lock()
	c.subs++
	bx.mu.Unlock()
	defer func() {
		bx.mu.Lock()
		c.subs--
		bx.mu.Unlock()
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan piece)
	streams := 2
	if c.pty {
		streams = 1
	}
	for fd := 1; fd <= streams; fd++ {
		go readStream(rctx, p, fd, from[fd-1], ch)
	}
	ka := newKeepalive(keepalive)
	defer ka.stop()
	for open := streams; open > 0; {
		select {
		case pc := <-ch:
			if pc.err != nil {
				return bx.lostEnd(ctx, c, pc.err, send)
			}
			if pc.out.Dropped > 0 {
				bx.h.log.Debug("process output dropped before a client read it", "sandbox", bx.id, "pid", c.pid, "fd", pc.fd, "bytes", pc.out.Dropped)
			}
			if len(pc.out.Data) > 0 {
				if err := send(dataEvent(c.pty, pc.fd, pc.out.Data)); err != nil {
					return err
				}
				ka.reset()
				bx.mu.Lock()
				c.sent[pc.fd-1] = max(c.sent[pc.fd-1], pc.out.Offset+int64(len(pc.out.Data)))
				bx.mu.Unlock()
			}
			if pc.out.End {
				open--
			}
		case <-ka.c():
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			ka.reset()
		case <-ctx.Done():
			return ctx.Err()
		case <-bx.done:
			return errSandboxGone()
		}
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return bx.lostEnd(ctx, c, err, send)
	}
	return bx.sendEnd(ctx, c, endEvent(res, nil), send)
}

// lostEnd ends a client's stream when reading the command failed: as
// envd's connection drops with its sandbox when that ended (the SDKs
// read unavailable as their TimeoutError, not as the command's exit),
// else with an end event saying what failed.
func (bx *box) lostEnd(ctx context.Context, c *cmd, err error, send func(*processpb.ProcessEvent) error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr // the client is gone
	}
	if errors.Is(err, sandbox.ErrTerminated) || bx.ended(ctx) {
		return errSandboxGone()
	}
	if errors.Is(err, sandbox.ErrNoProcess) {
		// Its record is gone (a supervisor restarted by an idle hand-off
		// keeps none of finished commands).
		err = errors.New("the command's record is gone: its exit is not known")
	}
	return bx.sendEnd(ctx, c, endEvent(nil, err), send)
}

// sendEnd sends the command's end, once the client is found still there
// and the box not forgotten. The command is collected first, so that a
// client that got the end finds it gone.
func (bx *box) sendEnd(ctx context.Context, c *cmd, end *processpb.ProcessEvent_EndEvent, send func(*processpb.ProcessEvent) error) error {
	if err := ctx.Err(); err != nil {
		return err // the end stays for another client
	}
	bx.mu.Lock()
	closed := bx.closed
	c.collected = !closed
	bx.mu.Unlock()
	if closed {
		return errSandboxGone()
	}
	bx.h.log.Debug("process ended", "sandbox", bx.id, "pid", c.pid, "status", end.Status)
	return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}})
}

// dataEvent is an event of output data of stream fd.
func dataEvent(pty bool, fd int, data []byte) *processpb.ProcessEvent {
	de := &processpb.ProcessEvent_DataEvent{}
	switch {
	case pty:
		de.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: data}
	case fd == 2:
		de.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: data}
	default:
		de.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: data}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: de}}
}

// endEvent describes how the command ended, as envd does with Go's
// os.ProcessState: exited with its code, or "signal: killed" with -1.
func endEvent(res *sandbox.ExecResult, err error) *processpb.ProcessEvent_EndEvent {
	if res == nil {
		msg := err.Error()
		code := int32(sandbox.ExitCode(err))
		if code <= 0 {
			code = 1
		}
		return &processpb.ProcessEvent_EndEvent{ExitCode: code, Status: "error: " + msg, Error: &msg}
	}
	if res.Signal != "" {
		status := "signal: " + res.Signal
		if n := res.ExitCode - 128; n > 0 && n < 65 {
			status = "signal: " + syscall.Signal(n).String()
		}
		return &processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := "exit status " + strconv.Itoa(res.ExitCode)
	end := &processpb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status}
	if res.ExitCode != 0 {
		end.Error = &status
	}
	return end
}
