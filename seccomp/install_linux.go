package seccomp

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install loads p as a seccomp filter on the calling thread only:
// seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog), without
// SECCOMP_FILTER_FLAG_TSYNC. The filter is inherited by threads and
// children the thread creates afterwards and survives execve; it cannot be
// removed.
//
// Preconditions: the caller has locked the goroutine to its OS thread
// (runtime.LockOSThread) and keeps it locked until it execs or exits, and
// no_new_privs is already set on the thread
// (prctl(PR_SET_NO_NEW_PRIVS, 1)); without it the kernel refuses the
// filter with EACCES unless the thread has CAP_SYS_ADMIN. Requires Linux
// 3.17 (seccomp(2)); the filters Compile makes use
// SECCOMP_RET_KILL_PROCESS, which needs 4.14.
//
// Errors wrap an *os.SyscallError carrying the errno.
func (p Program) Install() error {
	if len(p) == 0 {
		return errors.New("failed to install seccomp filter: empty program")
	}
	if len(p) > MaxInstructions {
		return fmt.Errorf("failed to install seccomp filter: %d instructions, the kernel accepts at most %d",
			len(p), MaxInstructions)
	}
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0,
		uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	if errno == unix.EACCES {
		return fmt.Errorf("failed to install seccomp filter (no_new_privs not set on this thread?): %w",
			os.NewSyscallError("seccomp", errno))
	}
	if errno != 0 {
		return fmt.Errorf("failed to install seccomp filter: %w", os.NewSyscallError("seccomp", errno))
	}
	return nil
}
