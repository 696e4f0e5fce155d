package sandbox

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ttyRelay connects a command's terminal (the master, on the host) to the
// caller's Stdin and Stdout and applies the caller's resizes.
type ttyRelay struct {
	master *os.File
	r      *relay
	wg     sync.WaitGroup // the output copy
	done   chan struct{}  // closed when the command has exited
	sink   *sink          // the capture of the output, when Stdout was nil
	once   sync.Once

	mu     sync.Mutex // master's use by resize against its close by wait
	closed bool
}

// startTTY starts relaying between master (the caller's from now on) and
// in and out: in (nil: nothing) is copied into the terminal, the
// terminal's output into out (nil: captured up to max bytes when
// capture is set, else dropped), and t.Resize is applied.
func startTTY(master *os.File, t *Terminal, in io.Reader, out io.Writer, capture bool, max int64) (*ttyRelay, error) {
	r, err := newRelay()
	if err != nil {
		master.Close()
		return nil, err
	}
	// The relay waits in poll(2) and must never block in a read or
	// write of the master (the init's copy shares the flag; it never
	// reads or writes its copy).
	if err := unix.SetNonblock(int(master.Fd()), true); err != nil {
		master.Close()
		r.close()
		return nil, os.NewSyscallError("fcntl(O_NONBLOCK)", err)
	}
	tr := &ttyRelay{master: master, r: r, done: make(chan struct{})}
	mfd := int(master.Fd())
	switch f, isFile := in.(*os.File); {
	case in == nil:
	case isFile && f != nil:
		dup, err := dupFile(f)
		if err != nil {
			master.Close()
			r.close()
			return nil, err
		}
		r.inputs.Add(1)
		go func() {
			defer r.inputs.Done()
			defer unix.Close(dup)
			_ = pumpFD(mfd, dup, r.stop, r.stopInput)
		}()
	default:
		// A reader that is not a file cannot be waited for in poll(2):
		// this copy ends with the reader (as os/exec's does).
		go func() { _, _ = io.Copy(fdWriter{fd: mfd, stop: r.stop}, in) }()
	}
	var dst io.Writer
	switch f, isFile := out.(*os.File); {
	case out == nil && capture:
		buf := &bytes.Buffer{}
		tr.sink = &sink{w: buf, buf: buf, limit: DefaultMaxOutput}
		if max > 0 {
			tr.sink.limit = max
		}
		dst = tr.sink
	case out == nil:
		dst = io.Discard
	case isFile && f != nil && max == 0:
		dup, err := dupFile(f)
		if err != nil {
			r.halt()
			master.Close()
			r.close()
			return nil, err
		}
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			defer unix.Close(dup)
			pumpOut(dup, mfd, r.stop)
		}()
	default:
		tr.sink = &sink{w: out, limit: -1}
		if max > 0 {
			tr.sink.limit = max
		}
		dst = tr.sink
	}
	if dst != nil {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			if errors.Is(pumpTo(dst, mfd, r.stop), errStopped) {
				drainFD(mfd, func(b []byte) bool { _, err := dst.Write(b); return err == nil })
			}
		}()
	}
	if t.Resize != nil {
		go func() {
			for {
				select {
				case <-tr.done:
					return
				case sz, ok := <-t.Resize:
					if !ok {
						return
					}
					tr.resize(sz)
				}
			}
		}()
	}
	return tr, nil
}

// resize sets the terminal's size; the kernel signals SIGWINCH to its
// foreground process group.
func (tr *ttyRelay) resize(sz WindowSize) {
	if sz.Rows == 0 || sz.Cols == 0 {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		return
	}
	_ = unix.IoctlSetWinsize(int(tr.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
}

// wait ends the relay once the command has exited: input stops at once,
// the output drains until every holder of the terminal is gone or grace
// has passed (a background job that keeps it), and the master is closed.
func (tr *ttyRelay) wait(grace time.Duration) {
	tr.once.Do(func() {
		close(tr.done)
		tr.r.stopInputs()
		out := make(chan struct{})
		go func() { tr.wg.Wait(); close(out) }()
		select {
		case <-out:
		case <-time.After(grace):
			tr.r.halt()
			<-out
		}
		tr.r.halt()
		tr.r.close()
		tr.mu.Lock()
		tr.closed = true
		tr.master.Close()
		tr.mu.Unlock()
	})
}

// pumpTo copies from src, waited for in poll(2) with stop, into w until
// end of file (EIO: every holder of the terminal is gone) or a stop.
func pumpTo(w io.Writer, src, stop int) error {
	buf := make([]byte, 32<<10)
	for {
		if err := waitFDs(src, -1, stop, stop); err != nil {
			return err
		}
		n, err := unix.Read(src, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
		case err == unix.EIO:
			return nil
		case err != nil:
			return err
		case n == 0:
			return nil
		}
	}
}

// fdWriter writes to a non-blocking descriptor, waiting in poll(2) while
// it is full, until stop.
type fdWriter struct{ fd, stop int }

func (w fdWriter) Write(b []byte) (int, error) {
	if err := writeAll(w.fd, b, w.stop); err != nil {
		return 0, err
	}
	return len(b), nil
}

// dupFile duplicates the caller's file for a relay (close-on-exec), so
// the caller may close its own once the command has started.
func dupFile(f *os.File) (int, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
	}
	return fd, nil
}
