// Package ctlmsg sends and receives JSON messages with attached file
// descriptors over SOCK_SEQPACKET unix sockets: one message per packet,
// descriptors passed with SCM_RIGHTS and received close-on-exec; a
// message may end with a binary tail after a NUL ([SendTail]). tent's
// host/init protocol and its supervisor protocol both use it.
//
// A socket is any syscall.Conn: a *net.UnixConn, or the *os.File of
// [NewConn], which works the same through the runtime's poller
// (deadlines, Close waking a blocked Recv) without importing package
// net: the sandbox init starts from package namespaces' initialisation,
// which runs once every package it imports is initialised, and net's
// imports are initialised last of all.
package ctlmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxMessage bounds one message (a config with a large seccomp profile
// is tens of KiB).
const MaxMessage = 1 << 20

// MaxFDs bounds the descriptors attached to one message.
const MaxFDs = 64

// ErrClosed is returned by Recv when the peer closed the socket.
var ErrClosed = errors.New("control socket closed")

// NewConn returns the socket fd as a *os.File for Send and Recv, in
// non-blocking mode so that it goes through the runtime's poller as a
// net.Conn would. The File owns fd.
func NewConn(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Send marshals v and sends it with fds attached (the caller keeps them).
func Send(c syscall.Conn, v any, fds []int) error {
	return SendTail(c, v, nil, fds)
}

// SendTail sends v followed by tail, bytes that are not JSON (a NUL
// byte, which marshalled JSON never holds, then tail), in one packet:
// bytes carried as a JSON string are base64, which both sides pay for
// by the kilobyte (encoded, compacted, validated, unquoted, decoded).
// [RecvTail] reads it; [Recv] refuses it.
func SendTail(c syscall.Conn, v any, tail []byte, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(tail) > 0 {
		b = append(append(b, 0), tail...)
	}
	return SendRaw(c, b, fds)
}

// SendRaw sends b, a message already marshalled, with fds attached (the
// caller keeps them).
func SendRaw(c syscall.Conn, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		for serr = unix.EINTR; serr == unix.EINTR; {
			serr = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
		}
		return serr != unix.EAGAIN
	})
	if err == nil && serr != nil {
		err = os.NewSyscallError("sendmsg", serr)
	}
	return err
}

// Recv reads one message into v and returns its descriptors, which the
// caller owns. A message with a tail ([SendTail]) is an error.
func Recv(c syscall.Conn, v any) ([]int, error) {
	fds, tail, err := RecvTail(c, v)
	if err == nil && tail != nil {
		Close(fds)
		return nil, errors.New("decoding control message: unexpected bytes after the JSON")
	}
	return fds, err
}

// RecvTail reads one message into v and returns its descriptors, which
// the caller owns, and its tail ([SendTail]; nil without one).
func RecvTail(c syscall.Conn, v any) ([]int, []byte, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	size, err := peekSize(rc)
	if err != nil {
		return nil, nil, err
	}
	// One byte more than announced, so that a message that grew between
	// the peek and the read (it cannot: a packet is atomic) would show as
	// truncated rather than silently cut.
	buf := make([]byte, size+1)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for rerr = unix.EINTR; rerr == unix.EINTR; {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		}
		return rerr != unix.EAGAIN
	})
	if err == nil && rerr != nil {
		err = os.NewSyscallError("recvmsg", rerr)
	}
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("parsing control message: %w", err)
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
		Close(fds)
		return nil, nil, errors.New("control message truncated")
	}
	if n == 0 {
		Close(fds)
		return nil, nil, ErrClosed
	}
	msg, tail := buf[:n], []byte(nil)
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg, tail = msg[:i], msg[i+1:]
	}
	if err := json.Unmarshal(msg, v); err != nil {
		Close(fds)
		return nil, nil, fmt.Errorf("decoding control message: %w", err)
	}
	return fds, tail, nil
}

// peekSize waits for the next packet and returns its length without
// consuming it (MSG_PEEK|MSG_TRUNC reports the real length of a
// SOCK_SEQPACKET packet), so that Recv allocates what the message needs
// rather than MaxMessage every time: the control path runs once per exec
// and a megabyte per message was most of its cost. A packet longer than
// MaxMessage is an error; 0 means the peer closed the socket.
func peekSize(rc syscall.RawConn) (int, error) {
	var n int
	var serr error
	err := rc.Read(func(fd uintptr) bool {
		for serr = unix.EINTR; serr == unix.EINTR; {
			n, _, serr = unix.Recvfrom(int(fd), nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		}
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, ErrClosed
	case n > MaxMessage:
		return 0, fmt.Errorf("control message of %d bytes exceeds %d", n, MaxMessage)
	}
	return n, nil
}

// Close closes every descriptor of fds that is not negative.
func Close(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
