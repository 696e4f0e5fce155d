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
type child struct {
	pid int

	mu     sync.Mutex
	reaped bool

	once   sync.Once
	status syscall.WaitStatus
	err    error
}

// kill sends SIGKILL; it is not an error when the child has exited or
// been reaped.
func (c *child) kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return nil
	}
	if err := unix.Kill(c.pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return os.NewSyscallError("kill", err)
	}
	return nil
}

// wait reaps the child once and returns its status to every caller.
func (c *child) wait() (syscall.WaitStatus, error) {
	c.once.Do(func() {
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
