package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// probeOpen is "open PATH r|w|c": open PATH to read, to write, or to
// create.
func probeOpen(args []string) {
	flags := map[string]int{"r": os.O_RDONLY, "w": os.O_WRONLY, "c": os.O_WRONLY | os.O_CREATE | os.O_TRUNC}[args[1]]
	fd, err := unix.Open(args[0], flags|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	}
	report(err)
}

// probeMkdir is "mkdir PATH".
func probeMkdir(args []string) {
	report(unix.Mkdir(args[0], 0o755))
}

// probePtrace is "ptrace PID": PTRACE_ATTACH to PID.
func probePtrace(args []string) {
	pid, _ := strconv.Atoi(args[0])
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
	report(errnoErr(e))
}

// probeKill is "kill PID": signal 0 to PID.
func probeKill(args []string) {
	pid, _ := strconv.Atoi(args[0])
	report(unix.Kill(pid, syscall.Signal(0)))
}

// probeTIOCSTI is "tiocsti FD [high]": push a byte into the terminal FD
// (high: with the request's upper 32 bits set).
func probeTIOCSTI(args []string) {
	fd, _ := strconv.Atoi(args[0])
	req := uintptr(unix.TIOCSTI)
	if len(args) > 1 && args[1] == "high" {
		req |= 0xffffffff00000000
	}
	c := byte('x')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafePointer(&c)))
	report(errnoErr(e))
}

// probeMsgget is "msgget KEY": get SysV message queue KEY.
func probeMsgget(args []string) {
	key, _ := strconv.Atoi(args[0])
	_, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), 0, 0)
	report(errnoErr(e))
}

// probeUnshare is "unshare FLAGS": unshare(2) with FLAGS (0x prefix for
// hex).
func probeUnshare(args []string) {
	flags, _ := strconv.ParseUint(args[0], 0, 64)
	report(unix.Unshare(int(flags)))
}

// probeSocket is "socket FAMILY TYPE": make a socket (numbers).
func probeSocket(args []string) {
	fam, _ := strconv.Atoi(args[0])
	typ, _ := strconv.Atoi(args[1])
	fd, err := unix.Socket(fam, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	report(err)
}

// probeSocketPair is "socketpair": make an AF_UNIX stream pair.
func probeSocketPair(args []string) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	report(err)
}

// probeSyscall is "syscall NR [ARG0]": make system call NR.
func probeSyscall(args []string) {
	nr, _ := strconv.Atoi(args[0])
	var a0 uint64
	if len(args) > 1 {
		a0, _ = strconv.ParseUint(args[1], 0, 64)
	}
	_, _, e := unix.Syscall(uintptr(nr), uintptr(a0), 0, 0)
	report(errnoErr(e))
}

// probeFDs is "fds": print the open fds.
func probeFDs(args []string) {
	ents, _ := os.ReadDir("/proc/self/fd")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	fmt.Println(strings.Join(names, " "))
}

// probeSid is "sid": print whether the probe leads its session.
func probeSid(args []string) {
	sid, _ := unix.Getsid(0)
	fmt.Println(sid == os.Getpid())
}

// probeAlloc is "alloc MiB": touch every page.
func probeAlloc(args []string) {
	n, _ := strconv.Atoi(args[0])
	var keep [][]byte
	for i := 0; i < n; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	fmt.Println("ok", len(keep))
}

// probeForkBomb is "forkbomb": start children until it fails; report the
// error.
func probeForkBomb(args []string) {
	var err error
	for i := 0; i < 10000; i++ {
		c := exec.Command("/bin/sleep", "271")
		if err = c.Start(); err != nil {
			break
		}
	}
	report(err)
}

// probeOrphans is "orphans SECONDS": double-fork and setsid'd sleepers of
// SECONDS, then sleep.
func probeOrphans(args []string) {
	d := "300"
	if len(args) > 0 {
		d = args[0]
	}
	for i := 0; i < 3; i++ {
		_ = exec.Command("/bin/sh", "-c", "setsid sleep "+d+" & (sleep "+d+" &) ; sleep "+d).Start()
	}
	time.Sleep(300 * time.Second)
}

// probeSpin is "spin MS": busy-loop for MS of wall time, print the CPU ms
// the loop used (not the start-up's).
func probeSpin(args []string) {
	ms, _ := strconv.Atoi(args[0])
	cpu := func() int64 {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return (ru.Utime.Sec+ru.Stime.Sec)*1000 + (ru.Utime.Usec+ru.Stime.Usec)/1000
	}
	before := cpu()
	end := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for time.Now().Before(end) {
	}
	fmt.Println(cpu() - before)
}

// probeNoFile is "nofile": open /dev/null until it fails; report the
// error.
func probeNoFile(args []string) {
	var err error
	for i := 0; i < 100000; i++ {
		if _, err = unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
			break
		}
	}
	report(err)
}
