package supervised

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// ExecDetached starts req.Args in the sandbox as a command its supervisor
// owns (docker exec -d) and returns the command's pid inside at once. It
// outlives the caller; its output (stdout and stderr, each kept apart) is
// kept for [Sandbox.Attach], its exit for [Sandbox.Processes] (see
// MaxDetached, MaxDetachedOutput). Of req, Args, Env, Dir and Timeout are
// used; a detached command has no stdin and no terminal, so Stdin, TTY
// and the caller's Stdout and Stderr are refused (ErrInvalidSpec).
func (s *Sandbox) ExecDetached(ctx context.Context, req sandbox.ExecRequest, o DetachOptions) (int, error) {
	if req.Stdin != nil || req.TTY != nil || req.Stdout != nil || req.Stderr != nil {
		return 0, fmt.Errorf("%w: a detached command has no stdin, terminal or caller's output (tent attach reads its output)", sandbox.ErrInvalidSpec)
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return 0, fmt.Errorf("%w: exec needs a command", sandbox.ErrInvalidSpec)
	}
	rec, err := s.dialRec()
	if err != nil {
		return 0, err
	}
	rep, err := call(ctx, rec, request{Op: opStart, Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, AsRoot: req.AsRoot, Tag: o.Tag}, nil)
	if err != nil {
		return 0, err
	}
	return rep.Pid, nil
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

// SignalProcess delivers sig to the detached command pid (its foreground
// process group); one that has exited, or is not known, is ErrNotFound.
func (s *Sandbox) SignalProcess(ctx context.Context, pid int, sig syscall.Signal) error {
	rec, err := s.dialRec()
	if err != nil {
		return err
	}
	_, err = call(ctx, rec, request{Op: opSignal, Pid: pid, Signal: int(sig)}, nil)
	return err
}

// Attach writes the detached command pid's output to stdout and stderr
// (both to stdout when stderr is nil) — what no earlier reader got (the
// last MaxDetachedOutput bytes of each at most), then what it writes —
// until it exits, and returns its result (its output is in the writers,
// not in the result). While attached, a command that writes faster than
// the writers take waits for them. Signals received on signals are
// delivered to it meanwhile. ctx's end detaches: the command goes on.
// A command that ended with its sandbox (terminated under it) has no
// status of its own: Attach then fails with sandbox.ErrTerminated.
func (s *Sandbox) Attach(ctx context.Context, pid int, stdout, stderr io.Writer, signals <-chan os.Signal) (*sandbox.ExecResult, error) {
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	var st stdio
	defer st.close()
	if stdout == nil {
		stdout = io.Discard
	}
	f, err := st.out(stdout)
	if err != nil {
		return nil, err
	}
	fds := []int{int(f.Fd())}
	if stderr != nil {
		ef, err := st.out(stderr)
		if err != nil {
			return nil, err
		}
		fds = append(fds, int(ef.Fd()))
	}
	conn, err := dial(rec)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, request{Op: opAttach, Pid: pid}, fds); err != nil {
		return nil, err
	}
	st.sent()
	done := make(chan struct{})
	defer close(done)
	go forward(ctx, conn, sandbox.ExecRequest{Signals: signals}, done)
	var rep reply
	_, rerr := ctlmsg.Recv(conn, &rep)
	st.wait()
	if rerr != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, rerr)
	}
	if rep.Result == nil {
		return nil, remoteError(rep)
	}
	return rep.Result, nil
}
