package namespaces

import (
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// CommandOOMScoreAdj is how much higher a sandbox's commands' OOM score
// adjustment is than their init's (capped at 1000, the kernel's maximum;
// 1000 itself when the init's is 0): when the sandbox reaches its memory
// limit, the kernel's OOM killer takes a command before the init. Without
// it the init, a Go program of several MiB resident (tens under the race
// detector), was the first victim among a command's many small processes,
// and the whole sandbox died with it (a shell starting forty 2 MB
// subshells under a 48 MiB limit). The kernel adds score/1000 of the
// memory limit to a process's resident size when it picks: a gap of 1000
// puts every command ahead of an init smaller than the limit, where 500
// did not (the race-instrumented init, 32 MiB under 48, was still picked).
// Under the host's own memory pressure, likewise, a sandbox's commands go
// first, as Kubernetes' best-effort pods do.
//
// The init cannot lower its own score (that needs CAP_SYS_RESOURCE on the
// host, and a privileged write would also let every command lower its own
// score that far, below the host's other processes), and a command's
// score cannot be set between its fork and its exec, so the init raises
// its own score around each fork: what it forks inherits the raised
// score, and the init goes back to its own at once. While one fork runs
// (tens of microseconds, forks one at a time) the init shares its
// commands' score. Commands cannot write /proc (Landlock); could they,
// they could lower their score only down to the init's.
const CommandOOMScoreAdj = 1000

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
	if o.set(o.base) != nil {
		_ = o.set(o.base)
	}
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
