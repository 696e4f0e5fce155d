package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// dial connects to rec's supervisor; a sandbox whose supervisor is gone
// fails with sandbox.ErrStopped.
func dial(rec *record) (*net.UnixConn, error) {
	if !rec.live() {
		return nil, fmt.Errorf("%w: %s is %s, its supervisor is gone (tent rm %s cleans up)", sandbox.ErrStopped, rec.ID, rec.State, rec.ID)
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: rec.Socket, Net: "unixpacket"})
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
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	conn, err := dial(rec)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	if err := ctlmsg.Send(conn, req, fds); err != nil {
		return reply{}, ctxErr(ctx, rec, err)
	}
	var rep reply
	if _, err := ctlmsg.Recv(conn, &rep); err != nil {
		return reply{}, ctxErr(ctx, rec, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, err))
	}
	if rep.Error != "" {
		return rep, remoteError(rep)
	}
	return rep, nil
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
