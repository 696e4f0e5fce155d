package sandbox

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// needsRelay reports whether the command could not reopen f by path
// (/proc/self/fd/N) for access (O_RDONLY or O_WRONLY, widened to the
// access f was opened with): a socket never can; a pipe or regular file
// can when its owner and mode let the sandbox's user in (owner nil: the
// caller's own ids); devices (terminals, /dev/null) and anything else
// are passed as they are.
func needsRelay(f *os.File, owner *pipeOwner, access int) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return true
	case unix.S_IFREG:
		if owner != nil && owner.landlock {
			return true
		}
	case unix.S_IFIFO:
	default:
		return false
	}
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
		access = fl & unix.O_ACCMODE
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if owner != nil {
		uid, gid = owner.uid, owner.gid
	}
	var want uint32
	switch access {
	case unix.O_RDONLY:
		want = 4
	case unix.O_WRONLY:
		want = 2
	default:
		want = 6
	}
	perm := st.Mode & 0o7
	switch {
	case int(st.Uid) == uid:
		perm = st.Mode >> 6 & 0o7
	case int(st.Gid) == gid:
		perm = st.Mode >> 3 & 0o7
	}
	return perm&want != want
}

// relay moves bytes between the pipes tent gave the command and the
// caller's descriptors, one goroutine per stream, each waiting in poll(2)
// on its source and on a stop eventfd, so that it can be stopped
// whatever the caller's descriptor is (tent never changes the caller's
// file status flags, which its shell shares).
type relay struct {
	stop      int // eventfd: readable once every pump must stop
	stopInput int // eventfd: readable once input pumps must stop
	outputs   sync.WaitGroup
	inputs    sync.WaitGroup
	once      sync.Once
}

func newRelay() (*relay, error) {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	stopInput, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(stop)
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &relay{stop: stop, stopInput: stopInput}, nil
}

// pump copies src to dst until src's end of file or a stop, then closes
// the relay's own end: dst for an input (the command then reads end of
// file), src for an output. The caller's file (src for an input, dst for
// an output) is used through a duplicate, so the caller may close its
// own as soon as the command has started (as with os/exec).
func (r *relay) pump(dst, src *os.File, input bool) {
	wg, stop := &r.outputs, r.stop
	if input {
		wg, stop = &r.inputs, r.stopInput
	}
	callers := dst
	if input {
		callers = src
	}
	dup, err := unix.FcntlInt(callers.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if input {
			defer dst.Close()
		} else {
			defer src.Close()
		}
		if err != nil {
			return
		}
		defer unix.Close(dup)
		if input {
			_ = pumpFD(int(dst.Fd()), dup, r.stop, stop)
		} else {
			pumpOut(dup, int(src.Fd()), r.stop)
		}
	}()
}

// errStopped ends a pump that was told to stop.
var errStopped = errors.New("relay stopped")

// pumpFD moves bytes from src to dst with splice(2), or read and write
// where one end cannot splice (a terminal, a file opened O_APPEND),
// waiting for both ends in poll(2) together with the stop eventfds.
func pumpFD(dst, src, stop1, stop2 int) error {
	useSplice := true
	var buf []byte
	for {
		// Always wait first: the caller's descriptor may be blocking
		// (tent never changes its flags), and a read of it must never
		// block where a stop could not end it.
		if err := waitFDs(src, dst, stop1, stop2); err != nil {
			return err
		}
		var n int
		var err error
		if useSplice {
			var m int64
			m, err = unix.Splice(src, nil, dst, nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			n = int(m)
			if err == unix.EINVAL || err == unix.ENOSYS || err == unix.EBADF {
				useSplice = false
				continue
			}
		} else {
			if buf == nil {
				buf = make([]byte, 128<<10)
			}
			n, err = unix.Read(src, buf)
			if n > 0 {
				if werr := writeAll(dst, buf[:n], stop1); werr != nil {
					return werr
				}
			}
		}
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
		case err == unix.EIO:
			return nil // a terminal whose every holder is gone
		case err != nil:
			return err
		case n == 0:
			return nil // end of file
		}
	}
}

// waitFDs waits until src is readable and dst writable, or a stop fd is
// readable (errStopped).
func waitFDs(src, dst, stop1, stop2 int) error {
	srcReady, dstReady := false, dst < 0
	for !srcReady || !dstReady {
		pfds := []unix.PollFd{{Fd: int32(stop1), Events: unix.POLLIN}, {Fd: int32(stop2), Events: unix.POLLIN}}
		if !srcReady {
			pfds = append(pfds, unix.PollFd{Fd: int32(src), Events: unix.POLLIN})
		}
		if !dstReady {
			pfds = append(pfds, unix.PollFd{Fd: int32(dst), Events: unix.POLLOUT})
		}
		if _, err := unix.Poll(pfds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return os.NewSyscallError("poll", err)
		}
		if pfds[0].Revents != 0 || pfds[1].Revents != 0 {
			return errStopped
		}
		for _, p := range pfds[2:] {
			if p.Revents == 0 {
				continue
			}
			if int(p.Fd) == src && p.Events == unix.POLLIN {
				srcReady = true
			} else {
				dstReady = true // writable, or an error the write reports
			}
		}
	}
	return nil
}

// writeAll writes b to fd, waiting in poll(2) while fd is full.
func writeAll(fd int, b []byte, stop int) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		switch {
		case err == unix.EAGAIN:
			pfds := []unix.PollFd{{Fd: int32(stop), Events: unix.POLLIN}, {Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(pfds, -1); err != nil && err != unix.EINTR {
				return os.NewSyscallError("poll", err)
			}
			if pfds[0].Revents != 0 {
				return errStopped
			}
		case err == unix.EINTR:
		case err != nil:
			return err
		default:
			b = b[n:]
		}
	}
	return nil
}

// pumpOut pumps an output (the command's side src, the caller's dst)
// until src's end of file or a stop, then takes what src holds at the stop
// (see copyOut).
func pumpOut(dst, src, stop int) {
	if errors.Is(pumpFD(dst, src, stop, stop), errStopped) {
		drainFD(src, func(b []byte) bool { return writeNow(dst, b) })
	}
}

// drainFD passes what src holds now to write, at most maxDrain bytes,
// waiting for neither end: what an output pump still takes once it is
// stopped (a background process kept the output after grace), since all
// the exited command wrote is there, however late the pump got to run.
func drainFD(src int, write func([]byte) bool) {
	buf := make([]byte, 4096) // one pipe buffer: writeNow's pipes take it whole
	for total := 0; total < maxDrain; {
		if !ready(src, unix.POLLIN) {
			return
		}
		n, err := unix.Read(src, buf)
		if err != nil || n <= 0 || !write(buf[:n]) {
			return
		}
		total += n
	}
}

// writeNow writes b to fd where that needs no wait; false once it would.
func writeNow(fd int, b []byte) bool {
	for len(b) > 0 {
		if !ready(fd, unix.POLLOUT) {
			return false
		}
		n, err := unix.Write(fd, b)
		if err != nil && err != unix.EINTR || n == 0 {
			return false
		}
		b = b[max(n, 0):]
	}
	return true
}

// ready says whether fd polls ready for events now.
func ready(fd int, events int16) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n == 1 && pfd[0].Revents&events != 0
}

// stopInputs stops the input pumps and waits for them: the command is
// gone, and nothing more may be taken from the caller's input.
func (r *relay) stopInputs() {
	_, _ = unix.Write(r.stopInput, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	r.inputs.Wait()
}

// halt stops every pump and waits for them.
func (r *relay) halt() {
	_, _ = unix.Write(r.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	r.inputs.Wait()
	r.outputs.Wait()
}

func (r *relay) close() {
	r.once.Do(func() {
		unix.Close(r.stop)
		unix.Close(r.stopInput)
	})
}
