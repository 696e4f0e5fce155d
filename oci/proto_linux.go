package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor's socket (ROOT/ID/sock, SOCK_SEQPACKET, in a directory
// only its owner can enter; peers of another uid are refused) takes one
// request per message: a JSON request, with descriptors as SCM_RIGHTS
// for exec. Every request but exec gets one reply and the connection
// ends; an exec's connection stays open: signals and resizes go in, one
// reply when the process started, one with its exit status at the end.

// request is a message to a container's supervisor.
type request struct {
	Op      string   `json:"op"` // state, start, kill, pause, resume, ps, exec; signal, resize on an exec's connection
	Signal  int      `json:"signal,omitempty"`
	All     bool     `json:"all,omitempty"`
	Process *process `json:"process,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
}

// reply is a supervisor's answer.
type reply struct {
	Error   string `json:"error,omitempty"`
	Status  string `json:"status,omitempty"`
	Pids    []int  `json:"pids,omitempty"`
	Started bool   `json:"started,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
}

// maxMessage bounds one message.
const maxMessage = 256 << 10

// sockPath is the socket of container id under root.
func sockPath(root, id string) string { return containerDir(root, id) + "/sock" }

func send(c *net.UnixConn, v any, fds ...int) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > maxMessage {
		return fmt.Errorf("message of %d bytes is too large", len(data))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(data, oob, nil)
	return err
}

// recv reads one message into v and returns the descriptors it carried
// (close-on-exec), which the caller owns. io.EOF means the peer closed.
func recv(c *net.UnixConn, v any) ([]*os.File, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return nil, perr
		}
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "received"))
			}
		}
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll()
		return nil, errors.New("truncated message")
	}
	if n == 0 {
		closeAll()
		return nil, errEOF
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll()
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	return files, nil
}

var errEOF = errors.New("connection closed")

// dial connects to container id's supervisor.
func dial(root, id string) (*net.UnixConn, error) {
	var c *net.UnixConn
	err := shortPath(sockPath(root, id), func(p string) (err error) {
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("container %s: its supervisor does not answer: %w", id, err)
	}
	return c, nil
}

// shortPath calls fn with a name for path that fits a unix socket's
// address (108 bytes): path itself, or, when too long (a deep --root and
// CRI's 64-digit ids), /proc/self/fd/N/NAME through a descriptor of its
// directory, opened without following a final symlink.
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

// call sends one request and reads its reply within timeout.
func call(root, id string, req request, timeout time.Duration) (*reply, error) {
	c, err := dial(root, id)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := send(c, req); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	var r reply
	files, err := recv(c, &r)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("container %s: %s: %w", id, req.Op, err)
	}
	if r.Error != "" {
		return &r, errors.New(r.Error)
	}
	return &r, nil
}

// peerIsOwner checks that c's peer runs as this process's user.
func peerIsOwner(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == os.Geteuid()
}
