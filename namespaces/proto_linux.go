package namespaces

import (
	"fmt"
	"net"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

func send(c *net.UnixConn, m message, fds []int) error {
	if err := ctlmsg.Send(c, m, fds); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// recv reads one message and its descriptors (close-on-exec).
func recv(c *net.UnixConn) (message, []int, error) {
	var m message
	fds, err := ctlmsg.Recv(c, &m)
	return m, fds, err
}

func closeAll(fds []int) { ctlmsg.Close(fds) }
