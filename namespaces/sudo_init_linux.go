package namespaces

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// sudoListen creates the listening socket of Config.Sudo at SudoSocket
// (in the init's tmpfs at SudoDir, which commands cannot write), mode
// 0666 so that any command can connect: the sandbox's processes are one
// user, and what the helper runs has no privilege that user lacks.
func sudoListen() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	_ = unix.Unlink(SudoSocket)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: SudoSocket}); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "bind", Path: SudoSocket, Err: err}
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, SudoSocket, 0o666, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		unix.Close(fd)
		return -1, &os.PathError{Op: "chmod", Path: SudoSocket, Err: err}
	}
	if err := unix.Listen(fd, 64); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("listen", err)
	}
	return fd, nil
}

// watchSudo waits, each time it is armed, until a connection waits on
// the listener fd, and then says so on wake. It never accepts: what a
// sandbox sends is read by the helper only. It waits in Go's poller, not
// in a blocking poll(2), so that it holds no thread of the init's (a
// sandbox at its process cap leaves the init none to spare).
func watchSudo(fd int, arm <-chan struct{}, wake chan<- struct{}) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(dup), "sudo-listener") // nonblocking: Go's poller
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	waiting := func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n > 0
	}
	for range arm {
		if err := rc.Read(waiting); err != nil {
			return
		}
		wake <- struct{}{}
	}
}

// startSudoHelper starts the sudo helper (SudoHelperArg0) as root of a
// nested user namespace, as Exec.Root starts any command, with the
// listener as its stdin. If it cannot, the waiting connections are
// closed unread, so that their clients fail rather than hang, and the
// watch starts again.
func (in *initLoop) startSudoHelper() {
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		e := Exec{Path: SudoBinary, Args: []string{SudoHelperArg0}, Env: in.cfg.Exec.Env, Dir: "/", Root: true}
		var pid int
		pid, _, err = in.sp.spawn(e, [3]int{in.sudo, null, null}, false)
		unix.Close(null)
		if err == nil {
			in.sudoPid = pid
			return
		}
	}
	for {
		cfd, _, err := unix.Accept4(in.sudo, unix.SOCK_CLOEXEC)
		if err != nil {
			break
		}
		unix.Close(cfd)
	}
	in.sudoArm <- struct{}{}
}
