package namespaces

import (
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// oomScore is the init's own /proc/self/oom_score_adj, opened when the
// init starts (before it makes itself non-dumpable, which gives its /proc
// files to root), and the score it started with.
type oomScore struct {
	mu   sync.Mutex // held across raise, fork and restore
	fd   int        // -1: not opened (not an init, or /proc was not readable)
	base int
}

// initOOM is this process's, when it is a sandbox init.
var initOOM = oomScore{fd: -1}

// open opens /proc/self/oom_score_adj and reads the current score. A
// failure leaves the score alone: commands then share the init's, as
// before this existed.
func (o *oomScore) open() {
	fd, err := unix.Open("/proc/self/oom_score_adj", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var b [16]byte
	n, err := unix.Pread(fd, b[:], 0)
	if err != nil || n == 0 {
		unix.Close(fd)
		return
	}
	base, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		unix.Close(fd)
		return
	}
	o.fd, o.base = fd, base
}

// forking runs fork, which forks one process, with this process's OOM
// score raised by CommandOOMScoreAdj, and restores it after.
func (o *oomScore) forking(fork func() (int, error)) (int, error) {
	if o.fd < 0 {
		return fork()
	}
	raised := min(o.base+CommandOOMScoreAdj, 1000)
	if raised == o.base {
		return fork()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set(raised) != nil {
		return fork() // best effort: the command gets the init's score
	}
	pid, err := fork()
	// Should the restore fail, the init keeps its commands' score: they
	// are then equals, as before CommandOOMScoreAdj existed.
	_ = o.set(o.base)
	return pid, err
}

// set writes score. write(2), not pwrite: it runs on the restricted
// thread that forks, under the commands' seccomp filter, which must allow
// write for the fork to report its errors at all (the kernel ignores the
// file offset here).
func (o *oomScore) set(score int) error {
	_, err := unix.Write(o.fd, []byte(strconv.Itoa(score)))
	return err
}
