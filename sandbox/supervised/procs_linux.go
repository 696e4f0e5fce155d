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

// Detached commands (tent exec -d) belong to the supervisor, not to the
// connection that started them: the caller gets the command's pid and
// goes; the supervisor keeps its output (stdout and stderr as one stream,
// the last MaxDetachedOutput bytes) and its exit, for tent ps, tent
// attach and tent kill from any process of the sandbox's owner. Bounds:
// MaxDetached records per sandbox (a full table drops its oldest finished
// record; with MaxDetached running it refuses), finished records for an
// hour, and only while the supervisor is awake: one hands off to its idle
// holder only once no command runs, and the records of finished ones go
// then.

// detached is one command the supervisor started for no connection.
type detached struct {
	pid     int
	args    []string
	started time.Time
	proc    *sandbox.Process
	out     *outRing
	read    int64         // the output offset the last reader reached
	done    chan struct{} // closed once res and ended are set
	res     *sandbox.ExecResult
	ended   time.Time
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
	out := newOutRing(MaxDetachedOutput)
	p, err := sb.Start(context.Background(), sandbox.ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout,
		AsRoot: req.AsRoot, Stdout: out, Stderr: out})
	if err != nil {
		return 0, err
	}
	d := &detached{pid: p.Pid, args: req.Args, started: time.Now(), proc: p, out: out, done: make(chan struct{})}
	t.procs = append(t.procs, d)
	go func() {
		res, _ := p.Wait()
		if res == nil { // the sandbox ended under it
			res = &sandbox.ExecResult{}
			res.ExitCode = 125
		}
		t.mu.Lock()
		d.res, d.ended = res, time.Now()
		t.mu.Unlock()
		out.close()
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
		total, dropped := d.out.stats(d.read)
		pi := ProcessInfo{Pid: d.pid, Args: d.args, Started: d.started, Running: !d.finished(), Unread: total, Dropped: dropped}
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
// to out (the caller's descriptor) until it exits, forwards the signals
// the caller sends, and answers with its result. The caller leaving
// leaves the command running.
func (t *procTable) serveAttach(conn *net.UnixConn, pid int, out *os.File) {
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
	t.mu.Lock()
	off := d.read
	t.mu.Unlock()
	for {
		data, next, changed, closed := d.out.since(off)
		if len(data) > 0 {
			if _, err := out.Write(data); err != nil {
				return // the caller's output is gone: so is the caller
			}
		}
		off = next
		t.mu.Lock()
		d.read = max(d.read, off)
		t.mu.Unlock()
		if closed && len(data) == 0 {
			break
		}
		select {
		case <-changed:
		case <-gone:
			return
		}
	}
	<-d.done
	_ = ctlmsg.Send(conn, reply{Result: d.res}, nil)
}

// outRing keeps the last max bytes written to it, and how many were
// written in all; readers follow it by offset.
type outRing struct {
	mu      sync.Mutex
	buf     []byte
	total   int64 // bytes ever written; buf holds the last len(buf)
	max     int
	changed chan struct{} // closed (and replaced) at each write and at close
	closed  bool
}

func newOutRing(max int) *outRing { return &outRing{max: max, changed: make(chan struct{})} }

// Write keeps p's tail within the bound; it never fails, so the command
// never blocks on its output.
func (r *outRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	if len(p) > r.max {
		p = p[len(p)-r.max:]
	}
	if over := len(r.buf) + len(p) - r.max; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, p...)
	r.total += int64(n)
	close(r.changed)
	r.changed = make(chan struct{})
	return n, nil
}

// close marks the end of the output.
func (r *outRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.changed)
	}
}

// since returns the output from offset off that is still kept (a copy),
// the offset after it, a channel closed at the next change, and whether
// the output has ended.
func (r *outRing) since(off int64) (data []byte, next int64, changed <-chan struct{}, closed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	off = max(off, first)
	data = slices.Clone(r.buf[off-first:])
	return data, r.total, r.changed, r.closed
}

// stats returns how many bytes a reader at off would get, and how many
// it missed.
func (r *outRing) stats(off int64) (unread, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	if off < first {
		dropped = first - off
		off = first
	}
	return r.total - off, dropped
}
