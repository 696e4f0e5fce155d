package supervised

import (
	"fmt"
	"net"

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
// answer that reports a failure is an [*Error].
func call(rec *record, req request, fds []int) (reply, error) {
	conn, err := dial(rec)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, req, fds); err != nil {
		return reply{}, err
	}
	var rep reply
	if _, err := ctlmsg.Recv(conn, &rep); err != nil {
		return reply{}, fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, err)
	}
	if rep.Error != "" {
		return rep, remoteError(rep)
	}
	return rep, nil
}
