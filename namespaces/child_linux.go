package namespaces

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is an init this process started or adopted (its parent). Its pid
// stays its own until this process reaps it, so a kill by pid is safe
// until then: wait blocks until the child is a zombie without reaping it
// (waitid WNOWAIT), then reaps it under the lock kill takes, so a kill
// never reaches a process that reused the pid.
//
// It replaces os.FindProcess, whose first use in a process checks that
// pidfds work by cloning a child and waiting for it: about 1 ms, on a
// 2-CPU host, in the middle of every `tent run`'s start.
//
// An init its parent reaps ([Options.ParentReaps]) is not this
// process's child: it is held by a pidfd (pidfd >= 0), which kill
// signals through and wait polls; its status is its parent's to learn.
type child struct {
	pid   int
	pidfd int // -1: a child of this process

	mu     sync.Mutex
	reaped bool

	once   sync.Once
	status syscall.WaitStatus
	err    error
}

// newChild holds pid, this process's child or, with notOurs, a process
// its parent reaps (by a pidfd, opened before the parent can reap it:
// see Options.ParentReaps).
func newChild(pid int, notOurs bool) (*child, error) {
	if !notOurs {
		return &child{pid: pid, pidfd: -1}, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return nil, fmt.Errorf("holding the sandbox init: %w", os.NewSyscallError("pidfd_open", err))
	}
	unix.CloseOnExec(fd)
	return &child{pid: pid, pidfd: fd}, nil
}

// kill sends SIGKILL; it is not an error when the child has exited or
// been reaped.
func (c *child) kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return nil
	}
	if c.pidfd >= 0 {
		if err := unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
			return os.NewSyscallError("pidfd_send_signal", err)
		}
		return nil
	}
	if err := unix.Kill(c.pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return os.NewSyscallError("kill", err)
	}
	return nil
}

// wait reaps the child once and returns its status to every caller; for
// a process its parent reaps, it waits for it to exit and returns 0.
func (c *child) wait() (syscall.WaitStatus, error) {
	c.once.Do(func() {
		if c.pidfd >= 0 {
			c.err = c.waitExit()
			return
		}
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				c.err = os.NewSyscallError("waitid", err)
				return
			}
			break
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for {
			_, err := syscall.Wait4(c.pid, &c.status, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				c.err = os.NewSyscallError("wait4", err)
			}
			break
		}
		c.reaped = true
	})
	return c.status, c.err
}

// waitExit waits until the process of c.pidfd has exited (its pidfd
// polls readable), then closes the pidfd.
func (c *child) waitExit() error {
	fds := []unix.PollFd{{Fd: int32(c.pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("poll", err)
		}
		if fds[0].Revents != 0 {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	unix.Close(c.pidfd)
	c.pidfd, c.reaped = -1, true
	return nil
}

// describeStatus says how a process ended, as os.ProcessState does.
func describeStatus(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}
