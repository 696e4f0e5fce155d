package supervised

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// Exec runs req in the sandbox through its supervisor (see
// sandbox.Sandbox.Exec for the request's rules). An *os.File in Stdin,
// Stdout or Stderr is passed to the supervisor as it is — the command
// writes to the caller's own terminal, pipe or file —; another reader or
// writer is copied through a pipe; a nil Stdout or Stderr is captured
// into the result (at most MaxOutput bytes, DefaultMaxOutput when 0).
// req.TTY's Resize and req.Signals are forwarded while the command runs.
// Cancelling ctx closes the session, which kills the command.
//
// In the supervisor the session is the core's Exec, Start + Wait on the
// sandbox's one process table (the command is listed and found by pid
// while it runs, from any client). The session itself stays apart from
// the process verbs for a reason: the caller's descriptors cross the
// socket (SCM_RIGHTS) to be the command's own stdio, with no copy through
// the supervisor's ring, and the session's connection is the command's
// lifetime (the caller going kills it), which a Process, the sandbox's,
// does not have.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	// A context that has already ended starts nothing: otherwise a quick
	// command could finish before the session's close reached the
	// supervisor, and be reported as run.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	var st stdio
	defer st.close()
	stdin, err := st.in(req.Stdin)
	if err != nil {
		return nil, err
	}
	var captured [2]*bytes.Buffer
	out := [2]io.Writer{req.Stdout, req.Stderr}
	if req.TTY != nil && out[1] == nil {
		out[1] = io.Discard // a terminal has one output
	}
	var files [2]*os.File
	for i, w := range out {
		if w == nil {
			captured[i] = &bytes.Buffer{}
			w = captured[i]
			if req.MaxOutput == 0 {
				req.MaxOutput = sandbox.DefaultMaxOutput
			}
		}
		if i == 1 && req.Stderr != nil && req.Stderr == req.Stdout {
			files[1] = files[0] // one pipe: the order of writes is kept
			continue
		}
		if files[i], err = st.out(w); err != nil {
			return nil, err
		}
	}
	conn, err := dial(rec)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r := request{Op: opExec, Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput, AsRoot: req.AsRoot, User: req.User}
	if err := ctlmsg.Send(conn, r, []int{int(stdin.Fd()), int(files[0].Fd()), int(files[1].Fd())}); err != nil {
		return nil, err
	}
	var open sessionMsg
	if req.TTY != nil {
		sz := req.TTY.Size
		if sz.Rows == 0 {
			sz.Rows = 24
		}
		if sz.Cols == 0 {
			sz.Cols = 80
		}
		open.TTY = &sz
	}
	if err := ctlmsg.Send(conn, open, nil); err != nil {
		return nil, err
	}
	st.sent() // the supervisor has the descriptors: close ours
	done := make(chan struct{})
	defer close(done)
	go forward(ctx, conn, req, done)
	var rep reply
	_, rerr := ctlmsg.Recv(conn, &rep)
	st.wait() // the copies end when the command's side closes
	if rerr != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, rerr)
	}
	if rep.Result == nil {
		return nil, remoteError(rep)
	}
	res := rep.Result
	if captured[0] != nil {
		res.Stdout = captured[0].Bytes()
	}
	if captured[1] != nil && req.TTY == nil {
		res.Stderr = captured[1].Bytes()
	}
	return res, nil
}

// forward sends the request's resizes and signals to the session until
// done; ctx's end closes the session (the supervisor kills the command).
func forward(ctx context.Context, conn *net.UnixConn, req sandbox.ExecRequest, done <-chan struct{}) {
	var resize <-chan sandbox.WindowSize
	if req.TTY != nil {
		resize = req.TTY.Resize
	}
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			_ = conn.CloseWrite()
			_ = conn.SetReadDeadline(aLongTimeAgo)
			return
		case sz, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			_ = ctlmsg.Send(conn, sessionMsg{Resize: &sz}, nil)
		case sig, ok := <-req.Signals:
			if !ok {
				req.Signals = nil
				continue
			}
			if s, isSys := sig.(syscall.Signal); isSys {
				_ = ctlmsg.Send(conn, sessionMsg{Signal: int(s)}, nil)
			}
		}
	}
}

// File runs a raw file operation, an archive stream, inside the sandbox
// through its supervisor (see sandbox.Sandbox.File); a failure the
// helper reports carries its errno (errors.Is(err, fs.ErrNotExist)
// works).
func (s *Sandbox) File(ctx context.Context, req sandbox.FileRequest) error {
	rec, err := s.dialRec()
	if err != nil {
		return err
	}
	var st stdio
	defer st.close()
	in, err := st.in(req.In)
	if err != nil {
		return err
	}
	w := req.Out
	if w == nil {
		w = io.Discard
	}
	out, err := st.out(w)
	if err != nil {
		return err
	}
	null, err := st.in(nil)
	if err != nil {
		return err
	}
	conn, err := dial(rec)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, request{Op: opFile, File: &req}, []int{int(in.Fd()), int(out.Fd()), int(null.Fd())}); err != nil {
		return err
	}
	st.sent()
	go func() {
		<-ctx.Done()
		_ = conn.SetReadDeadline(aLongTimeAgo)
	}()
	var rep reply
	_, rerr := ctlmsg.Recv(conn, &rep)
	st.wait()
	if rerr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, rerr)
	}
	if rep.Error != "" {
		if rep.Errno != 0 {
			return &os.PathError{Op: string(req.Op), Path: req.Path, Err: syscall.Errno(rep.Errno)}
		}
		return remoteError(rep)
	}
	return nil
}

// stdio is the descriptors one request passes: the caller's files as they
// are, pipes (copied by goroutines) for other readers and writers.
type stdio struct {
	mine   []*os.File // ours to close once sent
	feeds  []*os.File // the write ends of input pipes, closed at the end
	copies sync.WaitGroup
	after  []func()
}

// in returns the descriptor for r: r itself if it is a file, /dev/null
// for nil, else a pipe's read end fed from r.
func (s *stdio) in(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok {
		return f, nil
	}
	if r == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		s.mine = append(s.mine, f)
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.mine = append(s.mine, pr)
	s.feeds = append(s.feeds, pw)
	s.after = append(s.after, func() {
		// Not waited for: the command may never read it all. At r's end
		// the command sees its stdin's; if the request ends first, close
		// releases the pipe and the copy ends at its next write.
		go func() {
			_, _ = io.Copy(pw, r)
			pw.Close()
		}()
	})
	return pr, nil
}

// out returns the descriptor for w: w itself if it is a file, /dev/null
// for io.Discard, else a pipe's write end copied into w.
func (s *stdio) out(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	if w == io.Discard {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		s.mine = append(s.mine, f)
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.mine = append(s.mine, pw)
	s.copies.Add(1)
	s.after = append(s.after, func() {
		go func() {
			defer s.copies.Done()
			_, _ = io.Copy(w, pr)
			pr.Close()
		}()
	})
	return pw, nil
}

// sent closes our ends of what the supervisor now holds and starts the
// copies.
func (s *stdio) sent() {
	for _, f := range s.mine {
		f.Close()
	}
	s.mine = nil
	for _, f := range s.after {
		f()
	}
	s.after = nil
}

// wait waits for the output copies (they end when every copy of the
// pipes' write ends is closed: the command's and its descendants').
func (s *stdio) wait() { s.copies.Wait() }

// close releases what was not sent and the input pipes.
func (s *stdio) close() {
	for _, f := range append(s.mine, s.feeds...) {
		f.Close()
	}
}

// newID returns a fresh random sandbox id (16 hex digits).
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
