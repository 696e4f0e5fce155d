package sandbox

import (
	"bytes"
	"io"
	"os"
	"sync"
	"time"
)

// DefaultMaxOutput is the cap, in bytes, on each captured output stream
// of an exec (ExecRequest.Stdout or Stderr nil) when
// ExecRequest.MaxOutput is 0: 1 MiB, more than an agent's context takes
// in and little enough for many concurrent execs.
const DefaultMaxOutput = 1 << 20

// stdio holds an exec's descriptors: the caller's files as they are,
// /dev/null, or pipes whose other ends are copied from the caller's
// reader or into its writers and capture buffers.
type stdio struct {
	fds        [3]int
	childEnds  []*os.File // closed once the init has them
	ownedFiles []*os.File // closed at the end
	copies     sync.WaitGroup
	// out and err receive fds 1 and 2 when they are copied (nil when they
	// are a file passed as is or /dev/null); the same sink when both
	// share a pipe.
	out, err *sink
}

// openStdio sets up an exec's fds 0, 1 and 2 as [ExecRequest] documents
// (max is its MaxOutput, already checked not negative).
func openStdio(in io.Reader, out, errw io.Writer, max int64) (_ *stdio, err error) {
	s := &stdio{}
	defer func() {
		if err != nil {
			s.closeChildEnds()
			s.close()
		}
	}()
	f, err := s.input(in)
	if err != nil {
		return nil, err
	}
	s.fds[0] = int(f.Fd())
	if s.fds[1], s.out, err = s.output(out, max); err != nil {
		return nil, err
	}
	if out != nil && sameWriter(out, errw) {
		// One pipe for both, as os/exec does: the order of the
		// command's writes is kept and the writer is never called
		// concurrently.
		s.fds[2], s.err = s.fds[1], s.out
		return s, nil
	}
	if s.fds[2], s.err, err = s.output(errw, max); err != nil {
		return nil, err
	}
	return s, nil
}

// input returns fd 0: the caller's file, /dev/null for nil, or a pipe fed
// from the reader.
func (s *stdio) input(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok && f != nil {
		return f, nil
	}
	if r == nil {
		return s.devNull(os.O_RDONLY)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.childEnds = append(s.childEnds, pr)
	s.ownedFiles = append(s.ownedFiles, pw)
	go func() { _, _ = io.Copy(pw, r); pw.Close() }()
	return pr, nil
}

// output returns fd 1 or 2 for w and, when it is copied, its sink.
func (s *stdio) output(w io.Writer, max int64) (int, *sink, error) {
	var dst io.Writer
	var buf *bytes.Buffer
	limit := int64(-1) // none
	switch f, isFile := w.(*os.File); {
	case w == nil:
		buf = &bytes.Buffer{}
		dst, limit = buf, DefaultMaxOutput
		if max > 0 {
			limit = max
		}
	case w == io.Discard:
		null, err := s.devNull(os.O_WRONLY)
		if err != nil {
			return 0, nil, err
		}
		return int(null.Fd()), nil, nil
	case isFile && f != nil && max == 0:
		return int(f.Fd()), nil, nil // streamed with no copy
	default:
		dst = w
		if max > 0 {
			limit = max
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	s.childEnds = append(s.childEnds, pw)
	s.ownedFiles = append(s.ownedFiles, pr)
	k := &sink{w: dst, buf: buf, limit: limit}
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		// The sink never fails: this reads until every writer of the
		// pipe is gone (or wait cuts it off), so the command never
		// blocks on a full pipe.
		_, _ = io.Copy(k, pr)
	}()
	return int(pw.Fd()), k, nil
}

func (s *stdio) devNull(flag int) (*os.File, error) {
	f, err := os.OpenFile(os.DevNull, flag, 0)
	if err != nil {
		return nil, err
	}
	s.childEnds = append(s.childEnds, f)
	return f, nil
}

func (s *stdio) closeChildEnds() {
	for _, f := range s.childEnds {
		f.Close()
	}
	s.childEnds = nil
}

// wait lets the output copies drain; a background process that keeps an
// output pipe open is cut off after grace.
func (s *stdio) wait(grace time.Duration) {
	done := make(chan struct{})
	go func() { s.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		for _, f := range s.ownedFiles {
			f.Close()
		}
		<-done
	}
}

func (s *stdio) close() {
	for _, f := range s.ownedFiles {
		f.Close()
	}
}

// fill records the captured output and the truncations in res; call it
// after wait.
func (s *stdio) fill(res *ExecResult) {
	if s.out != nil {
		res.StdoutTruncated = s.out.truncated
		if s.out.buf != nil {
			res.Stdout = s.out.buf.Bytes()
		}
	}
	if s.err != nil {
		res.StderrTruncated = s.err.truncated
		if s.err.buf != nil && s.err != s.out {
			res.Stderr = s.err.buf.Bytes()
		}
	}
}

// sink is where one copied output stream goes: the caller's writer or a
// capture buffer, up to limit bytes (none when negative). Past the limit,
// or after the writer failed, it drops what it is given and reports
// success, so the copy keeps draining the pipe.
type sink struct {
	w         io.Writer
	buf       *bytes.Buffer // the capture buffer, when w is one
	limit     int64
	n         int64 // bytes passed on to w
	truncated bool  // bytes were dropped for the limit
	failed    bool  // w returned an error; the rest is dropped
}

func (k *sink) Write(p []byte) (int, error) {
	keep := p
	if k.limit >= 0 && k.n+int64(len(p)) > k.limit {
		keep = p[:k.limit-k.n]
		k.truncated = true
	}
	if len(keep) > 0 && !k.failed {
		if _, err := k.w.Write(keep); err != nil {
			k.failed = true
		}
	}
	k.n += int64(len(keep))
	return len(p), nil
}

// sameWriter reports whether a and b are the same writer; writers whose
// types cannot be compared are different.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
