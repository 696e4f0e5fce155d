package sandbox

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// How the command's stdio can be reopened
//
// A command reopens its stdio by path — /dev/stdout, /dev/fd/1,
// /proc/self/fd/1, `> /dev/stderr`, `curl -o /dev/stdout` — and the
// kernel then checks the inode's owner and mode as for any open: a pipe
// belongs to whoever created it (mode 0600), a file to its owner, and
// Landlock, whose rules name the sandbox's own paths, refuses a host file
// reached that way; a socket can never be reopened (ENXIO). A root
// caller's sandbox runs as host uid 65534, so its pipes cannot be
// reopened either. tent therefore gives the command:
//
//   - as they are: descriptors the sandbox's user can reopen for the
//     access they were opened with (a pipe it owns or whose mode lets it
//     in: an unprivileged caller's own pipes), terminals and other
//     devices, /dev/null, and regular files when Landlock is off;
//   - a root caller's pipes as they are too, lent to the sandbox's host
//     user while the command runs (see lend): no relay, so 100 MB
//     through a pipe costs what it costs under bubblewrap;
//   - for any other file or socket, a pipe owned by the sandbox's user
//     (fchown where tent's own ids differ) that tent relays to the
//     caller's descriptor with splice(2), or read and write where one end
//     cannot splice. A relayed stdin reads ahead and cannot be seeked.
//
// The pipes tent makes for readers, writers and captured output are the
// sandbox's user's the same way. The command gets nothing else of the
// host: the same data, on an object its own user may reopen.

// pipeOwner is the host uid and gid that tent's stdio pipes are given to
// (the sandbox's host identity), or nil when tent's own pipes are already
// theirs (an unprivileged caller).
type pipeOwner struct {
	uid, gid int
	// chown is set when tent's pipes must be given to uid and gid (a
	// root caller's sandbox runs as another host user).
	chown bool
	// landlock is set when the command runs under Landlock, whose rules
	// name paths inside the sandbox: a regular file of the host reached
	// through /proc/self/fd/N is then outside them (EACCES).
	landlock bool
}

// stdioOwner returns the owner for pipes made for a sandbox planned by p.
func stdioOwner(p *plan) *pipeOwner {
	uid, gid := p.hostIDs()
	return &pipeOwner{uid: uid, gid: gid, chown: uid != os.Geteuid() || gid != os.Getegid(), landlock: p.cfg.LandlockABI > 0}
}

// stdio holds an exec's descriptors: the caller's files as they are,
// /dev/null, or pipes whose other ends are copied from the caller's
// reader or into its writers and capture buffers, or relayed to the
// caller's files.
type stdio struct {
	fds        [3]int
	fdFiles    [3]*os.File // the files of fds (the caller's or s's own)
	childEnds  []*os.File  // closed once the init has them
	ownedFiles []*os.File  // closed at the end
	outReads   []*os.File  // of ownedFiles, the read ends copyOut copies
	copies     sync.WaitGroup
	// out and err receive fds 1 and 2 when they are copied (nil when they
	// are a file passed as is or /dev/null); the same sink when both
	// share a pipe.
	out, err *sink
	owner    *pipeOwner
	// relay moves bytes between tent's pipes and the caller's files; nil
	// until one is needed.
	relay *relay
	// nullOut makes a nil writer /dev/null instead of a capture buffer
	// (Cmd's convention; ExecRequest captures).
	nullOut bool
	// loans are the caller's pipes lent to the sandbox's user.
	loans []*loan
	// inW is the write end of the pipe fed from the caller's reader (nil
	// for a file, /dev/null or a terminal): closing it ends the input.
	inW *os.File
}

// closeInput ends the command's input: it reads end of file once what
// was written is read. Only input fed from a reader can be ended so.
func (s *stdio) closeInput() error {
	if s.inW == nil {
		return errors.New("sandbox: the command's stdin is not fed from a reader (a file is the caller's to close; a terminal's input ends with ^D)")
	}
	if err := s.inW.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// openStdio sets up an exec's fds 0, 1 and 2 as [ExecRequest] documents
// (max is its MaxOutput, already checked not negative), for a command
// that runs as the caller's own ids.
func openStdio(in io.Reader, out, errw io.Writer, max int64) (*stdio, error) {
	return openStdioFor(in, out, errw, max, nil)
}

// openStdioFor is openStdio for a command whose host ids are owner's
// (nil: the caller's).
func openStdioFor(in io.Reader, out, errw io.Writer, max int64, owner *pipeOwner) (*stdio, error) {
	return (&stdio{owner: owner}).open(in, out, errw, max)
}

// openCmdStdio sets up a Cmd's fds 0, 1 and 2: nil is /dev/null.
func openCmdStdio(in io.Reader, out, errw io.Writer, owner *pipeOwner) (*stdio, error) {
	return (&stdio{owner: owner, nullOut: true}).open(in, out, errw, 0)
}

func (s *stdio) open(in io.Reader, out, errw io.Writer, max int64) (_ *stdio, err error) {
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
	s.fdFiles[0] = f
	if s.fdFiles[1], s.out, err = s.output(out, max); err != nil {
		return nil, err
	}
	if out != nil && sameWriter(out, errw) {
		// One pipe for both, as os/exec does: the order of the
		// command's writes is kept and the writer is never called
		// concurrently.
		s.fdFiles[2], s.err = s.fdFiles[1], s.out
	} else if s.fdFiles[2], s.err, err = s.output(errw, max); err != nil {
		return nil, err
	}
	for i, f := range s.fdFiles {
		s.fds[i] = int(f.Fd())
	}
	return s, nil
}

// files returns fds 0-2 as files (for a Cmd's init): the caller's or s's
// own, never new *os.File values for the same descriptors (whose
// finalizers would close them twice).
func (s *stdio) files() [3]*os.File { return s.fdFiles }

// pipe makes a pipe for the command's stdio, owned by the sandbox's
// user.
func (s *stdio) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	if s.owner != nil && s.owner.chown {
		// Through the raw descriptor: r.Fd() would make r blocking,
		// and wait's cut-off needs its read deadline (see copyOut).
		if err := fchown(r, s.owner.uid, s.owner.gid); err != nil {
			r.Close()
			w.Close()
			return nil, nil, os.NewSyscallError("fchown (stdio pipe)", err)
		}
	}
	return r, w, nil
}

// fchown changes f's owner without taking f out of Go's poller.
func fchown(f *os.File, uid, gid int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Fchown(int(fd), uid, gid) }); err != nil {
		return err
	}
	return ferr
}

// input returns fd 0: the caller's file (relayed when the sandbox's user
// could not reopen it), /dev/null for nil, or a pipe fed from the reader.
func (s *stdio) input(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok && f != nil {
		if !needsRelay(f, s.owner, unix.O_RDONLY) || s.lend(f) {
			return f, nil
		}
		pr, pw, err := s.relayPipe()
		if err != nil {
			return nil, err
		}
		s.childEnds = append(s.childEnds, pr)
		s.relay.pump(pw, f, true)
		return pr, nil
	}
	if r == nil {
		return s.devNull(os.O_RDONLY)
	}
	pr, pw, err := s.pipe()
	if err != nil {
		return nil, err
	}
	s.childEnds = append(s.childEnds, pr)
	s.ownedFiles = append(s.ownedFiles, pw)
	s.inW = pw
	go func() { _, _ = io.Copy(pw, r); pw.Close() }()
	return pr, nil
}

// relayPipe makes a pipe for a relay (see pump), starting the relay.
func (s *stdio) relayPipe() (r, w *os.File, err error) {
	if s.relay == nil {
		if s.relay, err = newRelay(); err != nil {
			return nil, nil, err
		}
	}
	r, w, err = s.pipe()
	if err != nil {
		return nil, nil, err
	}
	// Fewer, larger moves: 1 MiB where the pipe limits allow it.
	_, _ = unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	return r, w, nil
}

// output returns fd 1 or 2 for w and, when it is copied, its sink.
func (s *stdio) output(w io.Writer, max int64) (*os.File, *sink, error) {
	var dst io.Writer
	var buf *bytes.Buffer
	limit := int64(-1) // none
	switch f, isFile := w.(*os.File); {
	case w == nil && s.nullOut, w == io.Discard:
		null, err := s.devNull(os.O_WRONLY)
		if err != nil {
			return nil, nil, err
		}
		return null, nil, nil
	case w == nil:
		buf = &bytes.Buffer{}
		dst, limit = buf, DefaultMaxOutput
		if max > 0 {
			limit = max
		}
	case isFile && f != nil && max == 0:
		if !needsRelay(f, s.owner, unix.O_WRONLY) || s.lend(f) {
			return f, nil, nil // streamed with no copy
		}
		pr, pw, err := s.relayPipe()
		if err != nil {
			return nil, nil, err
		}
		s.childEnds = append(s.childEnds, pw)
		s.relay.pump(f, pr, false)
		return pw, nil, nil
	default:
		dst = w
		if max > 0 {
			limit = max
		}
	}
	pr, pw, err := s.pipe()
	if err != nil {
		return nil, nil, err
	}
	s.childEnds = append(s.childEnds, pw)
	s.ownedFiles = append(s.ownedFiles, pr)
	s.outReads = append(s.outReads, pr)
	k := &sink{w: dst, buf: buf, limit: limit}
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		// The sink never fails: this reads until every writer of the
		// pipe is gone (or wait cuts it off), so the command never
		// blocks on a full pipe.
		copyOut(k, pr)
	}()
	return pw, k, nil
}

// maxDrain bounds what an output copy still takes once it is cut off: a
// pipe's worth (1 MiB is the most an unprivileged process can make a
// pipe hold), so a background writer cannot keep the copy going.
const maxDrain = 1 << 20

// copyOut copies the pipe pr into w until every writer of it is gone. A
// cut-off (wait sets a read deadline in the past: a background process
// still holds the pipe after grace) ends the wait for more, not the copy
// of what the pipe already holds: the command has exited, so all it
// wrote is there, however late this goroutine got to run (a loaded or
// emulated machine).
func copyOut(w io.Writer, pr *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainNow(w, pr, buf)
		}
		return
	}
}

// drainNow copies what f (a non-blocking pipe) holds now into w, at most
// maxDrain bytes, without waiting for more.
func drainNow(w io.Writer, f *os.File, buf []byte) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < maxDrain; {
		var n int
		if rc.Read(func(fd uintptr) bool {
			n, _ = unix.Read(int(fd), buf[:min(len(buf), maxDrain-total)])
			return true // never wait: EAGAIN is the end of what it holds
		}) != nil || n <= 0 {
			return
		}
		_, _ = w.Write(buf[:n])
		total += n
	}
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

// wait lets the output copies and relays drain; a background process
// that keeps an output pipe open is cut off after grace (grace < 0: no
// cut-off, for a sandbox whose processes are all gone). Input relays
// stop at once.
func (s *stdio) wait(grace time.Duration) {
	if s.relay != nil {
		s.relay.stopInputs()
	}
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		if s.relay != nil {
			s.relay.outputs.Wait()
		}
		close(done)
	}()
	var cut <-chan time.Time
	if grace >= 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		cut = t.C
	}
	select {
	case <-done:
	case <-cut:
		// The copies take what the pipes hold now and end (see
		// copyOut); an input copy still writing ends on its closed pipe.
		var cutOff []*os.File
		for _, f := range s.outReads {
			if f.SetReadDeadline(time.Unix(1, 0)) == nil {
				cutOff = append(cutOff, f)
			}
		}
		for _, f := range s.ownedFiles {
			if !slices.Contains(cutOff, f) {
				f.Close()
			}
		}
		if s.relay != nil {
			s.relay.halt()
		}
		<-done
	}
}

func (s *stdio) close() {
	for _, f := range s.ownedFiles {
		f.Close()
	}
	for _, l := range s.loans {
		l.giveBack()
	}
	s.loans = nil
	if s.relay != nil {
		s.relay.halt()
		s.relay.close()
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
