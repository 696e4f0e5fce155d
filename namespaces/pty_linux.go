package namespaces

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openPTY allocates a terminal in the sandbox's own devpts instance
// (mounted at /dev/pts with its own ptmx): the master, unlocked and set to
// size, and its peer opened through the master (TIOCGPTPEER, Linux 4.13,
// so no path of /dev/pts is looked up). Both are close-on-exec and
// O_NOCTTY: the init, a session leader without a terminal, must never
// acquire one. The peer belongs to the init's ids inside, which are the
// command's.
func openPTY(size WindowSize) (master, peer int, err error) {
	master, err = unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, os.NewSyscallError("open /dev/pts/ptmx", err)
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		return -1, -1, os.NewSyscallError("ioctl(TIOCSPTLCK)", err)
	}
	if size.Rows > 0 && size.Cols > 0 {
		if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols}); err != nil {
			unix.Close(master)
			return -1, -1, os.NewSyscallError("ioctl(TIOCSWINSZ)", err)
		}
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(master)
		return -1, -1, os.NewSyscallError("ioctl(TIOCGPTPEER)", errno)
	}
	return master, int(r), nil
}

// signalForeground delivers sig as a terminal or a shell would: to the
// foreground process group of the exec's terminal when it has one (the
// job in the foreground, whatever process group the shell gave it),
// otherwise to the process group the command leads (the command and
// every descendant that did not move to a group of its own). A group
// that is gone falls back to the command itself.
func signalForeground(pid, master int, sig unix.Signal) {
	if master >= 0 {
		// On a master, TIOCGPGRP reports the peer's foreground group, in
		// this (the sandbox's) pid namespace.
		if pgrp, err := unix.IoctlGetInt(master, unix.TIOCGPGRP); err == nil && pgrp > 0 {
			if unix.Kill(-pgrp, sig) == nil {
				return
			}
		}
	}
	if unix.Kill(-pid, sig) != nil {
		_ = unix.Kill(pid, sig)
	}
}

// killSession SIGKILLs every process of the session sid (an exec's: its
// command is the session leader), whatever process group it moved to:
// a shell's background jobs go with it. Descendants that started a
// session of their own are only reached by terminating the sandbox.
func killSession(sid int) {
	_ = unix.Kill(-sid, unix.SIGKILL)
	_ = unix.Kill(sid, unix.SIGKILL)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		if s, ok := sessionOf(pid); ok && s == sid {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// sessionOf reads the session id of pid from /proc/PID/stat (the sixth
// field, counted after the command name, which may hold spaces and
// parentheses).
func sessionOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	// After ") ": state ppid pgrp session ...
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return 0, false
	}
	sid, err := strconv.Atoi(f[3])
	return sid, err == nil
}
