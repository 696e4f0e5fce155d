package sandbox

import (
	"context"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// A process's stdin (StartOptions.Stdin) is a pipe fed from a queue:
// WriteStdin never waits for the command to read. It queues the bytes, or,
// when the command has not read maxStdinPending bytes written earlier (in
// the queue and in its pipe), refuses the whole write with ErrStdinFull at
// once. One goroutine per process writes the queue into the pipe as the
// command reads, without blocking a thread, and closes the pipe after the
// queue when CloseStdin asked for it. It ends with the command, and what
// is still queued then is dropped.

// stdinQueue is a process's stdin: the pipe's write end and what waits
// to go into it.
type stdinQueue struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when buf grows, closing or ended is set
	w       *os.File  // nil: the command has no stdin
	buf     []byte
	opened  bool // writes are taken (until CloseStdin or the end)
	closing bool // close w once buf is in it
	ended   bool // w is closed (or going): nothing more goes in
	broken  bool // the command closed its end
	shut    sync.Once
}

// open makes w the command's stdin, taking writes.
func (q *stdinQueue) open(w *os.File) {
	q.w, q.opened = w, true
	q.cond.L = &q.mu
}

// isOpen reports whether the stdin takes writes.
func (q *stdinQueue) isOpen() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.opened
}

// end closes the stdin now, dropping what is queued: the command is gone
// (or never started). A write into the pipe in progress ends.
func (q *stdinQueue) end() {
	if q.w == nil {
		return
	}
	q.mu.Lock()
	q.opened, q.ended, q.buf = false, true, nil
	q.cond.Broadcast()
	q.mu.Unlock()
	q.shut.Do(func() { q.w.Close() })
}

// pending is how many bytes the command has not read: queued, and in its
// pipe; q.mu is held.
func (q *stdinQueue) pending() int {
	n := len(q.buf)
	rc, err := q.w.SyscallConn()
	if err != nil {
		return n
	}
	_ = rc.Control(func(fd uintptr) {
		if inPipe, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n += inPipe
		}
	})
	return n
}

// feed writes the queue into the pipe until the stdin is closed (then
// closes the pipe) or ends.
func (q *stdinQueue) feed() {
	rc, err := q.w.SyscallConn()
	if err != nil {
		q.end()
		return
	}
	for {
		q.mu.Lock()
		for len(q.buf) == 0 && !q.closing && !q.ended {
			q.cond.Wait()
		}
		ended, closing := q.ended, q.closing && len(q.buf) == 0
		q.mu.Unlock()
		if ended {
			return
		}
		if closing {
			q.mu.Lock()
			q.ended = true
			q.mu.Unlock()
			q.shut.Do(func() { q.w.Close() })
			return
		}
		var werr error
		err := rc.Write(func(fd uintptr) bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.ended || len(q.buf) == 0 {
				return true
			}
			n, err := unix.Write(int(fd), q.buf)
			if n > 0 {
				q.buf = q.buf[n:]
			}
			if len(q.buf) == 0 {
				q.buf = nil
				return true
			}
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				werr = err
				return true
			}
			return false // the pipe is full: wait until the command reads
		})
		if err == nil {
			err = werr
		}
		if err != nil { // closed under it (end), or the command closed its end
			q.mu.Lock()
			q.opened, q.broken, q.ended, q.buf = false, !q.ended, true, nil
			q.mu.Unlock()
			q.shut.Do(func() { q.w.Close() })
			return
		}
	}
}

// WriteStdin queues b for the command's stdin (see [Process.WriteStdin]).
func (p *tableProc) WriteStdin(ctx context.Context, b []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q := &p.stdin
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := p.stdinWritableLocked(); err != nil {
		return err
	}
	if pending := q.pending(); pending+len(b) > maxStdinPending {
		return fmt.Errorf("%w: the command with pid %d has not read %d bytes of its input, and at most %d may wait: it is not reading its input; write less, or later", ErrStdinFull, p.pid, pending, maxStdinPending)
	}
	q.buf = append(q.buf, b...)
	q.cond.Signal()
	return nil
}

// stdinWritableLocked checks that the command's stdin takes writes;
// p.stdin.mu is held.
func (p *tableProc) stdinWritableLocked() error {
	q := &p.stdin
	if p.finished() {
		return fmt.Errorf("%w: the command with pid %d has already exited", ErrNoProcess, p.pid)
	}
	if q.broken {
		return fmt.Errorf("%w: the command with pid %d closed its stdin", ErrInvalidSpec, p.pid)
	}
	if !q.opened {
		return fmt.Errorf("%w: the command with pid %d has no stdin open (start it with StartOptions.Stdin; once closed it stays closed)", ErrInvalidSpec, p.pid)
	}
	return nil
}

// CloseStdin ends the command's stdin once it has the input queued
// before (see [Process.CloseStdin]).
func (p *tableProc) CloseStdin(ctx context.Context) error {
	q := &p.stdin
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := p.stdinWritableLocked(); err != nil {
		return err
	}
	q.opened, q.closing = false, true
	q.cond.Broadcast()
	return nil
}
