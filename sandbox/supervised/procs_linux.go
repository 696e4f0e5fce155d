package supervised

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// Detached commands (tent exec -d, and tent serve's commands) belong to
// the supervisor, not to the connection that started them: the caller
// gets the command's pid and goes; the supervisor keeps its output
// (stdout and stderr apart, the last MaxDetachedOutput bytes of each) and
// its exit, for tent ps, tent attach and tent kill from any process of
// the sandbox's owner. While a reader is attached, a command that writes
// faster than the reader reads waits, as on a pipe; with none, its oldest
// unread output is dropped (and counted) and it never waits. Bounds:
// MaxDetached records per sandbox (a full table drops its oldest finished
// record; with MaxDetached running it refuses), finished records for an
// hour, and only while the supervisor is awake: one hands off to its idle
// holder only once no command runs, and the records of finished ones go
// then.

// detached is one command the supervisor started for no connection.
type detached struct {
	pid     int
	args    []string
	dir     string
	tag     string
	started time.Time
	proc    *sandbox.Process
	out     [2]*outRing   // stdout, stderr
	done    chan struct{} // closed once res and ended are set
	res     *sandbox.ExecResult
	ended   time.Time
	lost    bool // it ended with its sandbox: no status of its own
}

// procTable holds a supervisor's detached commands.
type procTable struct {
	mu    sync.Mutex
	procs []*detached // oldest first
}

// start starts req detached in sb and records it.
func (t *procTable) start(sb *sandbox.Sandbox, req request) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	if len(t.procs) >= MaxDetached {
		i := slices.IndexFunc(t.procs, func(d *detached) bool { return d.finished() })
		if i < 0 {
			return 0, fmt.Errorf("%w: %d detached commands run in this sandbox already: wait for some to end, or kill them (tent ps, tent kill)", sandbox.ErrUnsupported, MaxDetached)
		}
		t.procs = slices.Delete(t.procs, i, i+1)
	}
	if req.Tag != "" {
		for _, d := range t.procs {
			if d.tag == req.Tag && !d.finished() {
				return 0, fmt.Errorf("%w: the detached command %d runs with tag %q", sandbox.ErrInvalidSpec, d.pid, req.Tag)
			}
		}
	}
	out := [2]*outRing{newOutRing(MaxDetachedOutput), newOutRing(MaxDetachedOutput)}
	p, err := sb.Start(context.Background(), sandbox.ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout,
		AsRoot: req.AsRoot, Stdout: out[0], Stderr: out[1]})
	if err != nil {
		return 0, err
	}
	d := &detached{pid: p.Pid, args: req.Args, dir: req.Dir, tag: req.Tag, started: time.Now(), proc: p, out: out, done: make(chan struct{})}
	t.procs = append(t.procs, d)
	go func() {
		res, _ := p.Wait()
		lost := res == nil
		if lost { // the sandbox ended under it
			res = &sandbox.ExecResult{}
			res.ExitCode = 125
		}
		t.mu.Lock()
		d.res, d.ended, d.lost = res, time.Now(), lost
		t.mu.Unlock()
		out[0].close()
		out[1].close()
		close(d.done)
	}()
	return p.Pid, nil
}

// finished reports whether d has exited (its record complete).
func (d *detached) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// pruneLocked drops the records of commands that ended over an hour ago.
func (t *procTable) pruneLocked(now time.Time) {
	t.procs = slices.DeleteFunc(t.procs, func(d *detached) bool {
		return d.finished() && now.Sub(d.ended) > detachedKeep
	})
}

// find returns the record of pid.
func (t *procTable) find(pid int) (*detached, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	for _, d := range t.procs {
		if d.pid == pid {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: no detached command with pid %d in this sandbox (tent ps lists them)", ErrNoProcess, pid)
}

// list describes every record, oldest first.
func (t *procTable) list() []ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	out := make([]ProcessInfo, 0, len(t.procs))
	for _, d := range t.procs {
		pi := ProcessInfo{Pid: d.pid, Args: d.args, Dir: d.dir, Tag: d.tag, Started: d.started, Running: !d.finished()}
		for _, r := range d.out {
			unread, dropped := r.stats()
			pi.Unread += unread
			pi.Dropped += dropped
		}
		if !pi.Running {
			ended := d.ended
			pi.Ended, pi.Exit, pi.Signal = &ended, d.res.ExitCode, d.res.Signal
		}
		out = append(out, pi)
	}
	return out
}

// signal delivers sig to a running detached command.
func (t *procTable) signal(pid int, sig syscall.Signal) error {
	d, err := t.find(pid)
	if err != nil {
		return err
	}
	if d.finished() {
		return fmt.Errorf("%w: the command with pid %d has already exited", ErrNoProcess, pid)
	}
	return d.proc.Signal(sig)
}

// serveAttach streams a detached command's output since its last reader
// to outs (the caller's descriptors: stdout and stderr, or one for both)
// until it exits, forwards the signals the caller sends, and answers with
// its result. The caller leaving leaves the command running.
func (t *procTable) serveAttach(conn *net.UnixConn, pid int, outs []*os.File) {
	d, err := t.find(pid)
	if err != nil {
		_ = ctlmsg.Send(conn, failure(err), nil)
		return
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			var m sessionMsg
			fds, err := ctlmsg.Recv(conn, &m)
			closeFDs(fds)
			if err != nil {
				return
			}
			if m.Signal > 0 && m.Signal < 65 && !d.finished() {
				_ = d.proc.Signal(syscall.Signal(m.Signal))
			}
		}
	}()
	var readers [2]*ringReader
	for i, r := range d.out {
		readers[i] = r.attach()
		defer r.detach(readers[i])
	}
	for {
		ended := true
		var waits [2]<-chan struct{}
		for i, r := range d.out {
			data, changed, closed := r.next(readers[i])
			if len(data) > 0 {
				if _, err := outs[min(i, len(outs)-1)].Write(data); err != nil {
					return // the caller's output is gone: so is the caller
				}
				r.advance(readers[i], len(data))
			}
			ended = ended && closed && len(data) == 0
			waits[i] = changed
		}
		if ended {
			break
		}
		select {
		case <-waits[0]:
		case <-waits[1]:
		case <-gone:
			return
		}
	}
	<-d.done
	if d.lost {
		_ = ctlmsg.Send(conn, failure(fmt.Errorf("%w: the sandbox ended while the command ran", sandbox.ErrTerminated)), nil)
		return
	}
	_ = ctlmsg.Send(conn, reply{Result: d.res}, nil)
}

// outRing keeps the last max bytes written to it that no reader got,
// and how many were written in all. Readers follow it by offset: the
// next reader starts where the last one left; while any is attached, a
// write that does not fit waits for them to read.
type outRing struct {
	mu      sync.Mutex
	buf     []byte
	total   int64 // bytes ever written; buf holds the last len(buf)
	read    int64 // where the last reader left
	max     int
	changed chan struct{} // closed (and replaced) at each write, read and at close
	readers map[*ringReader]struct{}
	closed  bool
}

// ringReader is one attached reader's position.
type ringReader struct{ off int64 }

func newOutRing(max int) *outRing {
	return &outRing{max: max, changed: make(chan struct{}), readers: map[*ringReader]struct{}{}}
}

// notify wakes every wait; r.mu is held.
func (r *outRing) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// slowest is the lowest offset of an attached reader; r.mu is held.
func (r *outRing) slowest() (int64, bool) {
	low, any := int64(0), false
	for rd := range r.readers {
		if !any || rd.off < low {
			low, any = rd.off, true
		}
	}
	return low, any
}

// Write keeps p's tail within the bound. With a reader attached it waits
// until the readers have read enough for p to fit; with none it never
// waits, and drops the oldest bytes.
func (r *outRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	for {
		low, attached := r.slowest()
		if !attached || r.closed || r.total-low == 0 || r.total-low+int64(len(p)) <= int64(r.max) {
			break
		}
		ch := r.changed
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
	if len(p) > r.max {
		p = p[len(p)-r.max:]
	}
	if over := len(r.buf) + len(p) - r.max; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, p...)
	r.total += int64(n)
	r.notify()
	return n, nil
}

// close marks the end of the output.
func (r *outRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.notify()
	}
}

// attach adds a reader, starting where the last one left.
func (r *outRing) attach() *ringReader {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := &ringReader{off: r.read}
	r.readers[rd] = struct{}{}
	return rd
}

// detach removes a reader; writes waiting for it go on.
func (r *outRing) detach(rd *ringReader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.readers, rd)
	r.notify()
}

// next returns what rd has not read that is still kept (a copy), a
// channel closed at the next change, and whether the output has ended.
func (r *outRing) next(rd *ringReader) (data []byte, changed <-chan struct{}, closed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	rd.off = max(rd.off, first)
	return slices.Clone(r.buf[rd.off-first:]), r.changed, r.closed
}

// advance records that rd has read n more bytes, and lets go of what
// every reader has read: no later reader gets it.
func (r *outRing) advance(rd *ringReader, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd.off += int64(n)
	r.read = max(r.read, rd.off)
	keep := r.read
	if low, ok := r.slowest(); ok {
		keep = min(keep, low)
	}
	if first := r.total - int64(len(r.buf)); keep > first {
		if keep == r.total {
			r.buf = nil
		} else {
			r.buf = r.buf[keep-first:]
		}
	}
	r.notify()
}

// stats returns how many bytes the next reader gets, and how many were
// dropped unread.
func (r *outRing) stats() (unread, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := r.read
	if first := r.total - int64(len(r.buf)); off < first {
		dropped = first - off
		off = first
	}
	return r.total - off, dropped
}
