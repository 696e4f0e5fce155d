package supervised

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// A supervisor takes requests only from outside every sandbox.
//
// Its control socket is a path in the state directory, and connect(2)
// on a path needs no write permission on the directory: a sandbox that
// sees the state directory (any mount that contains it, even read-only)
// could otherwise ask its own supervisor to attach a host directory,
// widen its network policy or exec, or talk to other sandboxes'
// supervisors in the same directory. Landlock cannot scope pathname
// sockets on the kernels tent supports, so each connection's peer is
// checked instead, before its request is read:
//
//   - its uid (SO_PEERCRED, as seen from the supervisor's user namespace)
//     must be the supervisor's own or root's: a root caller's sandbox
//     runs as an unprivileged host id and fails here;
//   - it must live in the supervisor's own pid namespace: every sandbox
//     has a pid namespace of its own, so a process of any sandbox fails
//     here, whichever supervisor it calls. An unprivileged caller's
//     sandbox has the caller's uid, so this is the check that counts
//     for it.
//
// Where the kernel has SO_PEERPIDFD (Linux 6.5), the peer is pinned by a
// pidfd for the check, so a peer that exits and whose pid is reused by a
// process outside cannot pass for it; on older kernels the pid is read
// once, right after accept.

// errPeerRefused is a control connection from a peer that may not drive
// the supervisor.
var errPeerRefused = errors.New("refused: only processes outside the sandbox, of the sandbox's owner, may use its control socket")

// checkPeer returns nil if conn's peer may drive this supervisor.
func checkPeer(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	pidfd := -1
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr != nil {
			return
		}
		if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = p
		}
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w (%v)", errPeerRefused, err)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if euid := uint32(os.Geteuid()); cred.Uid != euid && cred.Uid != 0 {
		return fmt.Errorf("%w (peer uid %d)", errPeerRefused, cred.Uid)
	}
	// A pid of 0 is a peer in a pid namespace that is not ours or below.
	if cred.Pid <= 0 {
		return fmt.Errorf("%w (peer outside this pid namespace)", errPeerRefused)
	}
	mine, err := pidNS("self")
	if err != nil {
		return fmt.Errorf("%w (%v)", errPeerRefused, err)
	}
	theirs, err := pidNS(fmt.Sprint(cred.Pid))
	if err != nil {
		return fmt.Errorf("%w (%v)", errPeerRefused, err)
	}
	if pidfd >= 0 {
		// Still the process that connected: a pidfd of a process that
		// exited (its pid perhaps reused since) cannot be signalled.
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return fmt.Errorf("%w (peer gone: %v)", errPeerRefused, err)
		}
	}
	if theirs != mine {
		return fmt.Errorf("%w (peer pid %d is in another pid namespace)", errPeerRefused, cred.Pid)
	}
	return nil
}

// pidNS identifies the pid namespace of /proc/PID (device and inode of
// its ns/pid link).
func pidNS(pid string) ([2]uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+pid+"/ns/pid", &st); err != nil {
		return [2]uint64{}, &os.PathError{Op: "stat", Path: "/proc/" + pid + "/ns/pid", Err: err}
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}
