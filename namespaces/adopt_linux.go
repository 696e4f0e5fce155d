package namespaces

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// Adopt returns the host side of a running long-lived sandbox's init
// that this process started before it replaced itself with exec (tent's
// idle supervisor): pid is the init, a child of this process, and fd its
// control socket, which Adopt takes over. Call [Init.Serve] on the result
// as after [Init.Run].
func Adopt(pid, fd int, log *slog.Logger) (*Init, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || domain != unix.AF_UNIX {
		unix.Close(fd)
		return nil, fmt.Errorf("adopting the init: descriptor %d is not a unix socket", fd)
	}
	conn, err := ctlmsg.NewConn(fd, "tent-control")
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("adopting the init's control socket: %w", err)
	}
	// A child of this process, whose pid cannot be recycled before the
	// reap (child); anything else is refused.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("adopting the init: pid %d: %w", pid, os.NewSyscallError("waitid", err))
	}
	return &Init{proc: &child{pid: pid, pidfd: -1}, pid: pid, conn: conn, log: log}, nil
}

// DupControl returns a duplicate of the control socket's descriptor,
// without close-on-exec, for a process image that will [Adopt] the init.
func (i *Init) DupControl() (int, error) { return ctlmsg.Dup(i.conn) }

// Idle reports whether nothing is pending with a live init: no exec or
// attach awaits its answer, and its control socket has not failed.
func (i *Init) Idle() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.waits) == 0 && i.deadErr == nil
}
