package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// The sandbox's processes (Handle.Start): commands the sandbox owns, not
// the caller that started them. The table keeps each one's output
// (stdout and stderr apart, the last maxProcessOutput bytes of each) and
// its exit, for any later caller: by pid, by offset into the output
// (ReadOutput), or following it (Process.Follow, from an offset,
// consuming nothing), and its stdin for writes when it was started with
// one (a bounded queue: see procs_stdin_linux.go). While a follower is
// attached, a command that writes faster than the follower reads waits,
// as on a pipe; with none, its oldest output is dropped (and counted) and
// it never waits. Exec is Start + Wait on the same table (exec): its
// command is listed and found by pid while it runs, and its record goes
// at its Wait. Bounds: maxProcesses records of Start'd commands per
// sandbox (a full table drops its oldest finished record; with
// maxProcesses running it refuses), finished records for processKeep;
// an Exec'd command has a record only while its caller waits for it, so
// the table keeps no finished Exec. Local keeps the table in the caller's
// process; package supervised keeps it in the sandbox's supervisor.

// procTable holds a sandbox's processes.
type procTable struct {
	mu    sync.Mutex
	procs []*tableProc // oldest first
}

// tableProc is one command of a procTable: the [Process] of Local.
type tableProc struct {
	pid     int
	args    []string
	dir     string
	tag     string
	tty     bool
	started time.Time
	job     *Job
	out     [2]*outRing   // stdout, stderr
	done    chan struct{} // closed once res and ended are set
	res     *ExecResult
	ended   time.Time
	lost    bool // it ended with its sandbox: no status of its own

	// held: an Exec'd command, whose stdio is its caller's (its rings
	// stay empty) and whose record goes at its Wait.
	held bool

	// stdin is the write end of its stdin (nil: none), fed from a
	// bounded queue (procs_stdin_linux.go).
	stdin stdinQueue
}

var _ Process = (*tableProc)(nil)

// StartProcess starts req as a [Process] the sandbox owns and records it
// (see [Handle.Start]). req's Stdin, Stdout, Stderr and Signals must be
// nil, and its TTY, if any, gives only the terminal's size (its Resize
// channel must be nil: use Process.Resize); Timeout applies from now.
// ctx bounds the start only.
func (s *Sandbox) StartProcess(ctx context.Context, req ExecRequest, o StartOptions) (Process, error) {
	if req.Stdin != nil || req.Stdout != nil || req.Stderr != nil || req.Signals != nil || (req.TTY != nil && req.TTY.Resize != nil) {
		return nil, fmt.Errorf("%w: a process owns its stdio: write its stdin with WriteStdin (StartOptions.Stdin), read its output with ReadOutput, resize and signal it through the Process", ErrInvalidSpec)
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return nil, fmt.Errorf("%w: exec needs a command", ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.procs.start(s, req, o)
}

// start starts req in sb and records it.
func (t *procTable) start(sb *Sandbox, req ExecRequest, o StartOptions) (*tableProc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	if t.keptLocked() >= maxProcesses {
		i := slices.IndexFunc(t.procs, func(p *tableProc) bool { return p.finished() && !p.held })
		if i < 0 {
			return nil, fmt.Errorf("%w: %d detached commands run in this sandbox already: wait for some to end, or kill them (tent ps, tent kill)", ErrUnsupported, maxProcesses)
		}
		t.procs = slices.Delete(t.procs, i, i+1)
	}
	if o.Tag != "" {
		for _, p := range t.procs {
			if p.tag == o.Tag && !p.finished() {
				return nil, fmt.Errorf("%w: the detached command %d runs with tag %q", ErrInvalidSpec, p.pid, o.Tag)
			}
		}
	}
	p := &tableProc{args: req.Args, dir: req.Dir, tag: o.Tag, tty: req.TTY != nil, started: time.Now(), done: make(chan struct{}),
		out: [2]*outRing{newOutRing(maxProcessOutput), newOutRing(maxProcessOutput)}}
	var stdinR *os.File
	if o.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		stdinR = r
		p.stdin.open(w)
		req.Stdin = r
	}
	req.Stdout, req.Stderr = p.out[0], p.out[1]
	job, err := sb.Start(context.Background(), req)
	if stdinR != nil {
		stdinR.Close() // the command (or its terminal's relay) has its own
	}
	if err != nil {
		p.stdin.end()
		return nil, err
	}
	p.job, p.pid = job, job.Pid
	t.procs = append(t.procs, p)
	go p.reap(&t.mu)
	if o.Stdin {
		go p.stdin.feed()
	}
	return p, nil
}

// keptLocked counts the records kept for later: those of Start'd
// commands; t.mu is held.
func (t *procTable) keptLocked() int {
	n := 0
	for _, p := range t.procs {
		if !p.held {
			n++
		}
	}
	return n
}

// exec runs req in sb as a process of the table and waits for it: Exec
// is Start + Wait. Unlike a Start'd command's, its stdio is the caller's:
// req's files are handed to the command as they are (the fast path: no
// copy through a ring; with a terminal, its relay writes to the caller),
// its Signals, Resize, Timeout and ctx apply while it runs, and output
// given no writer is captured into the result. Its record is in the table
// while it runs (listed; found by pid, signalled, resized, waited for by
// another caller; its output is its caller's, so ReadOutput finds none)
// and dropped at its Wait, here: it takes none of the maxProcesses
// records kept for later.
func (t *procTable) exec(ctx context.Context, sb *Sandbox, req ExecRequest) (*ExecResult, error) {
	// The record is in before anyone can see the command (its output),
	// as a Start'd command's is.
	t.mu.Lock()
	job, err := sb.start(ctx, req, false)
	if err != nil {
		t.mu.Unlock()
		return nil, err
	}
	p := &tableProc{pid: job.Pid, args: req.Args, dir: req.Dir, tty: req.TTY != nil, started: job.start, job: job, held: true,
		done: make(chan struct{}), out: [2]*outRing{newOutRing(0), newOutRing(0)}}
	p.out[0].close()
	p.out[1].close()
	t.procs = append(t.procs, p)
	t.mu.Unlock()
	res, err := job.Wait()
	t.mu.Lock()
	p.res, p.ended, p.lost = res, time.Now(), res == nil
	if p.lost {
		p.res = &ExecResult{}
		p.res.ExitCode = 125
	}
	t.procs = slices.DeleteFunc(t.procs, func(q *tableProc) bool { return q == p })
	t.mu.Unlock()
	close(p.done)
	return res, err
}

// reap waits for p's command and completes its record.
func (p *tableProc) reap(mu *sync.Mutex) {
	res, _ := p.job.Wait()
	lost := res == nil
	if lost { // the sandbox ended under it
		res = &ExecResult{}
		res.ExitCode = 125
	}
	mu.Lock()
	p.res, p.ended, p.lost = res, time.Now(), lost
	mu.Unlock()
	p.out[0].close()
	p.out[1].close()
	close(p.done)
	p.stdin.end() // after done: a write it cuts short reads the exit
}

// finished reports whether p has exited (its record complete).
func (p *tableProc) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pruneLocked drops the records of commands that ended processKeep ago.
func (t *procTable) pruneLocked(now time.Time) {
	t.procs = slices.DeleteFunc(t.procs, func(p *tableProc) bool {
		return p.finished() && now.Sub(p.ended) > processKeep
	})
}

// find returns the record of pid.
func (t *procTable) find(pid int) (*tableProc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	for _, p := range t.procs {
		if p.pid == pid {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: no detached command with pid %d in this sandbox (tent ps lists them)", ErrNoProcess, pid)
}

// Process finds the sandbox's [Process] pid (see [Handle.Process]); an
// unknown pid is [ErrNoProcess].
func (s *Sandbox) Process(ctx context.Context, pid int) (Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.procs.find(pid)
}

// Processes describes the sandbox's processes, running and finished,
// oldest first (see [Handle.Processes]).
func (s *Sandbox) Processes(ctx context.Context) ([]ProcessInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &s.procs
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(time.Now())
	out := make([]ProcessInfo, 0, len(t.procs))
	for _, p := range t.procs {
		pi := ProcessInfo{Pid: p.pid, Args: p.args, Dir: p.dir, Tag: p.tag, TTY: p.tty, Exec: p.held, Started: p.started, Running: !p.finished()}
		pi.Stdin = p.stdin.isOpen()
		for i, r := range p.out {
			unread, dropped := r.stats()
			pi.Unread += unread
			pi.Dropped += dropped
			pi.Taken[i] = r.seenAt()
		}
		if !pi.Running {
			ended := p.ended
			pi.Ended, pi.Exit, pi.Signal = &ended, p.res.ExitCode, p.res.Signal
		}
		out = append(out, pi)
	}
	return out, nil
}

func (p *tableProc) Pid() int { return p.pid }

// Wait waits for the command's exit (see [Process.Wait]).
func (p *tableProc) Wait(ctx context.Context) (*ExecResult, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p.lost {
		return nil, fmt.Errorf("%w: the sandbox ended while the command ran", ErrTerminated)
	}
	res := *p.res
	return &res, nil
}

// Signal delivers sig to the running command (see [Process.Signal]).
func (p *tableProc) Signal(ctx context.Context, sig syscall.Signal) error {
	if p.finished() {
		return fmt.Errorf("%w: the command with pid %d has already exited", ErrNoProcess, p.pid)
	}
	return p.job.Signal(sig)
}

// Resize resizes the command's terminal (see [Process.Resize]).
func (p *tableProc) Resize(ctx context.Context, sz WindowSize) error {
	if !p.tty {
		return fmt.Errorf("%w: the command with pid %d has no terminal to resize", ErrInvalidSpec, p.pid)
	}
	if p.finished() {
		return fmt.Errorf("%w: the command with pid %d has already exited", ErrNoProcess, p.pid)
	}
	return p.job.Resize(sz)
}

// ReadOutput reads stream fd from off (see [Process.ReadOutput]).
func (p *tableProc) ReadOutput(ctx context.Context, fd int, off int64) (Output, error) {
	if fd != 1 && fd != 2 {
		return Output{}, fmt.Errorf("%w: output stream %d: want 1 (stdout) or 2 (stderr)", ErrInvalidSpec, fd)
	}
	r := p.out[fd-1]
	for {
		out, changed := r.readAt(off, maxOutputRead)
		if len(out.Data) > 0 || out.End {
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
	}
}

// Follow writes stream fd from off to w as an attached reader (see
// [Process.Follow]).
func (p *tableProc) Follow(ctx context.Context, fd int, off int64, w io.Writer) (int64, error) {
	if fd != 1 && fd != 2 {
		return off, fmt.Errorf("%w: output stream %d: want 1 (stdout) or 2 (stderr)", ErrInvalidSpec, fd)
	}
	r := p.out[fd-1]
	rd, start, ok := r.attachAt(off)
	if !ok {
		return off, fmt.Errorf("%w: offset %d of output stream %d: not written yet (%d bytes are)", ErrInvalidSpec, off, fd, r.written())
	}
	defer r.detach(rd)
	if start > off {
		return start, fmt.Errorf("%w: %d bytes of stream %d from offset %d", ErrOutputDropped, start-off, fd, off)
	}
	for {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		data, changed, closed := r.next(rd, maxOutputRead)
		if len(data) > 0 {
			n, err := w.Write(data)
			r.advance(rd, n)
			off += int64(n)
			if err == nil && n < len(data) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return off, err
			}
			continue
		}
		if closed {
			return off, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return off, ctx.Err()
		}
	}
}
