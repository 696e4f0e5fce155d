package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// dial connects to rec's supervisor; a sandbox whose supervisor is gone
// fails with sandbox.ErrStopped.
func dial(rec *record) (*net.UnixConn, error) {
	if !rec.live() {
		return nil, fmt.Errorf("%w: %s is %s, its supervisor is gone (tent rm %s cleans up)", sandbox.ErrStopped, rec.ID, rec.State, rec.ID)
	}
	var conn *net.UnixConn
	err := shortPath(rec.Socket, func(p string) (err error) {
		conn, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", sandbox.ErrStopped, rec.ID, err)
	}
	return conn, nil
}

// call sends one request to rec's supervisor and reads the answer; an
// answer that reports a failure is an [*Error]. The exchange honours
// ctx: its deadline bounds the socket's, and its end cuts the exchange
// short, with an error that matches ctx.Err() (a stopped or stuck
// supervisor does not hang the caller).
func call(ctx context.Context, rec *record, req request, fds []int) (reply, error) {
	rep, got, err := exchange(ctx, rec, req, fds)
	ctlmsg.Close(got) // none expected
	return rep, err
}

// exchange is call, returning the descriptors the answer carried too
// (the caller's to close, failure or not).
func exchange(ctx context.Context, rec *record, req request, fds []int) (reply, []int, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, nil, err
	}
	conn, err := dial(rec)
	if err != nil {
		return reply{}, nil, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	if err := ctlmsg.Send(conn, req, fds); err != nil {
		return reply{}, nil, ctxErr(ctx, rec, err)
	}
	var rep reply
	got, err := ctlmsg.Recv(conn, &rep)
	if err != nil {
		return reply{}, got, ctxErr(ctx, rec, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, err))
	}
	if rep.Error != "" {
		return rep, got, remoteError(rep)
	}
	return rep, got, nil
}

// ctxErr is err, or, when ctx has ended (which is what cut the exchange
// short), an error that matches ctx.Err().
func ctxErr(ctx context.Context, rec *record, err error) error {
	cerr := ctx.Err()
	if _, ok := ctx.Deadline(); ok && cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline is ctx's: it may pass a moment before
		// ctx's own timer fires.
		cerr = context.DeadlineExceeded
	}
	if cerr == nil {
		return err
	}
	return fmt.Errorf("sandbox %s: its supervisor did not answer: %w", rec.ID, cerr)
}

// shortPath calls fn with a name for the socket at path that fits a unix
// socket's address (108 bytes): path itself, or, when too long (a deep
// state directory, such as tent-runc's ROOT/ID with CRI's 64-digit ids),
// /proc/self/fd/N/NAME through a descriptor of its directory, opened
// without following a final symlink.
func shortPath(path string, fn func(string) error) error {
	if len(path) < 100 {
		return fn(path)
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(dir)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path)))
}
