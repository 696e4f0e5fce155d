package main

import (
	"encoding/json"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// The supervisor's control protocol: SOCK_SEQPACKET, one JSON message per
// packet, descriptors attached with SCM_RIGHTS.

// ctlRequest is what a CLI verb asks a sandbox's supervisor.
type ctlRequest struct {
	Op      string                 `json:"op"` // exec, net, rm
	Args    []string               `json:"args,omitempty"`
	Env     []string               `json:"env,omitempty"`
	Dir     string                 `json:"dir,omitempty"`
	Timeout int64                  `json:"timeout_ns,omitempty"`
	Network *sandbox.NetworkPolicy `json:"network,omitempty"`
}

// ctlReply is the supervisor's answer.
type ctlReply struct {
	Error    string `json:"error,omitempty"`
	Code     int    `json:"code"` // the exit code to use
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// Blocked summarises the connections the network policy refused
	// during an exec.
	Blocked string `json:"blocked,omitempty"`
}

func ctlSend(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	return err
}

func ctlRecv(c *net.UnixConn, v any) ([]int, error) {
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("connection closed")
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	return fds, nil
}

// dialSupervisor connects to a sandbox's control socket.
func dialSupervisor(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	return c, nil
}
