package namespaces

import (
	"encoding/json"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// maxMessage bounds one control message (a config with a large seccomp
// profile is tens of KiB).
const maxMessage = 1 << 20

// maxFDs bounds the descriptors attached to one message.
const maxFDs = 64

func send(c *net.UnixConn, m message, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// recv reads one message and its descriptors (close-on-exec).
func recv(c *net.UnixConn) (message, []int, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, err
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return message{}, nil, fmt.Errorf("parsing control message: %w", err)
		}
		for _, cm := range cmsgs {
			got, err := unix.ParseUnixRights(&cm)
			if err != nil {
				continue
			}
			for _, fd := range got {
				unix.CloseOnExec(fd)
			}
			fds = append(fds, got...)
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(fds)
		return message{}, nil, fmt.Errorf("control message truncated")
	}
	if n == 0 {
		return message{}, nil, fmt.Errorf("control socket closed")
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(fds)
		return message{}, nil, fmt.Errorf("decoding control message: %w", err)
	}
	return m, fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
