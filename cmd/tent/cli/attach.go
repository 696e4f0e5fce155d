package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// tent attach is a client of the sandbox's Process, as every frontend is
// (E2B's envd drives a command on a terminal the same way): its output
// followed from where the last reader left (ProcessInfo.Taken), its
// stdin written with WriteStdin, its terminal resized with Resize, its
// signals delivered with Signal, its status from Wait. The command is the
// sandbox's: tent attach going (killed, its terminal closed, or the
// detach keys) leaves it running, for another tent attach.

// Detach keys: Ctrl-P Ctrl-Q, as docker's, on a command's terminal.
const (
	detachFirst  = 0x10 // Ctrl-P
	detachSecond = 0x11 // Ctrl-Q
)

// errDetached is attachProcess's answer when the caller detached.
var errDetached = errors.New("detached")

// attachProcess follows p (pi describes it) to its exit and returns its
// result: its output, from what no earlier reader took, to stdout and
// stderr (a terminal's all to stdout); with stdin, tent's stdin to its
// own when that is open (pi.Stdin). On a terminal (pi.TTY) the caller's
// terminal is put in raw mode meanwhile (with stdin), its size given to
// the command's and kept in step, and Ctrl-P Ctrl-Q detaches
// (errDetached); without one, the end of tent's stdin ends the command's.
func attachProcess(ctx context.Context, p sandbox.Process, pi sandbox.ProcessInfo, stdin bool) (*sandbox.ExecResult, error) {
	stdin = stdin && pi.Stdin
	// On a terminal command, tent's own terminal is read even when the
	// command takes no input (started without -i, or --no-stdin), for
	// the detach keys alone: otherwise a command that ignores SIGINT and
	// SIGQUIT (a shell) would leave no way out but another terminal.
	keysOnly := pi.TTY && !stdin && inForeground(int(os.Stdin.Fd()))
	var ct *callerTerm
	if pi.TTY {
		var err error
		if ct, err = openCallerTerm(termFlags{tty: true, interactive: stdin || keysOnly}); err != nil {
			return nil, err
		}
		defer ct.restore()
		if sz := ct.size(); sz.Rows > 0 {
			_ = p.Resize(ctx, sz)
		}
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := notifySignals()
	defer sigs.stop()
	resize := make(chan sandbox.WindowSize, 4)
	sigs.start(ct, resize, func(s os.Signal) {
		if sig, ok := s.(syscall.Signal); ok {
			_ = p.Signal(actx, sig)
		}
	})
	go func() {
		for {
			select {
			case sz := <-resize:
				_ = p.Resize(actx, sz)
			case <-actx.Done():
				return
			}
		}
	}()
	detached := make(chan struct{})
	switch {
	case stdin:
		go feedStdin(actx, p, os.Stdin, pi.TTY, detached)
	case keysOnly:
		go watchDetachKeys(os.Stdin, detached)
	}
	streams := 2
	if pi.TTY {
		streams = 1 // a terminal's output is all on stdout
	}
	outs := [2]io.Writer{os.Stdout, os.Stderr}
	var wg sync.WaitGroup
	errs := make([]error, streams)
	for i := range streams {
		wg.Go(func() { errs[i] = followFrom(actx, p, i+1, pi.Taken[i], outs[i]) })
	}
	followed := make(chan struct{})
	go func() { wg.Wait(); close(followed) }()
	select {
	case <-followed:
	case <-detached:
		cancel()
		<-followed
		return nil, errDetached
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sigs.stop()
	return p.Wait(ctx)
}

// followFrom writes stream fd of p to w from off until it ends; output
// the ring dropped meanwhile is skipped (it keeps the last MiB).
func followFrom(ctx context.Context, p sandbox.Process, fd int, off int64, w io.Writer) error {
	for {
		end, err := p.Follow(ctx, fd, off, w)
		if !errors.Is(err, sandbox.ErrOutputDropped) {
			return err
		}
		off = end
	}
}

// feedStdin copies in to p's stdin until in ends (then, but on a
// terminal, it closes p's: a terminal's input does not end with one
// caller) or a write fails (the command exited). On a terminal, Ctrl-P
// Ctrl-Q closes detached instead of reaching the command. The sandbox
// keeps at most 1 MiB the command has not read:
// while it holds that much, tent waits for room, as a pipe would.
func feedStdin(ctx context.Context, p sandbox.Process, in io.Reader, tty bool, detached chan<- struct{}) {
	buf := make([]byte, 32<<10)
	var keys detachScanner
	for {
		n, rerr := in.Read(buf)
		data, detach := buf[:n], false
		if tty {
			data, detach = keys.scan(data)
		}
		if err := writeStdin(ctx, p, data); err != nil {
			return
		}
		if detach {
			close(detached)
			return
		}
		if rerr != nil {
			if !tty {
				_ = p.CloseStdin(ctx)
			}
			return
		}
	}
}

// inForeground reports whether fd is a terminal whose foreground process
// group is tent's: a tent attach started in the background (&) leaves
// the terminal's mode alone (changing it would stop tent with SIGTTOU).
func inForeground(fd int) bool {
	if !term.IsTerminal(fd) {
		return false
	}
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// watchDetachKeys reads in until the detach keys come (then it closes
// detached) or in ends, and drops the rest: the command takes no input.
// It is left blocked in its read when tent attach returns first, which
// is only when tent exits.
func watchDetachKeys(in io.Reader, detached chan<- struct{}) {
	buf := make([]byte, 256)
	var keys detachScanner
	for {
		n, err := in.Read(buf)
		if _, detach := keys.scan(buf[:n]); detach {
			close(detached)
			return
		}
		if err != nil {
			return
		}
	}
}

// writeStdin writes b to p's stdin, waiting while the sandbox holds as
// much unread input as it keeps (ErrStdinFull: the write was refused
// whole, so it is sent again).
func writeStdin(ctx context.Context, p sandbox.Process, b []byte) error {
	for wait := time.Millisecond; len(b) > 0; wait = min(2*wait, 100*time.Millisecond) {
		err := p.WriteStdin(ctx, b)
		if !errors.Is(err, sandbox.ErrStdinFull) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// detachScanner finds the detach keys in a terminal's input.
type detachScanner struct {
	held bool // the last read ended with Ctrl-P
}

// scan returns b without the detach keys, and whether they came; a
// Ctrl-P that ends b is held until the next byte says whether it is one.
func (d *detachScanner) scan(b []byte) ([]byte, bool) {
	out := make([]byte, 0, len(b)+1)
	for _, c := range b {
		if d.held {
			d.held = false
			if c == detachSecond {
				return out, true
			}
			out = append(out, detachFirst)
		}
		if c == detachFirst {
			d.held = true
			continue
		}
		out = append(out, c)
	}
	return out, false
}
