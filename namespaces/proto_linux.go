package namespaces

import (
	"fmt"
	"os"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// The control socket is an *os.File (ctlmsg.NewConn) rather than a
// net.UnixConn: the init starts from this package's initialisation, and
// importing package net would put it behind every package net's imports
// wait for (see internal/ctlmsg).

func send(c *os.File, m message, fds []int) error {
	if err := ctlmsg.Send(c, m, fds); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// recv reads one message and its descriptors (close-on-exec).
func recv(c *os.File) (message, []int, error) {
	var m message
	fds, err := ctlmsg.Recv(c, &m)
	return m, fds, err
}

func closeAll(fds []int) { ctlmsg.Close(fds) }
