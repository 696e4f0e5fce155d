package namespaces

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// oomScore is the init's OOM score adjustment, read when it starts, and
// so its commands' (see CommandOOMScoreAdj).
type oomScore struct {
	known bool // false: not an init, or /proc was not readable
	base  int
	comm  string // the init's name, which a child it forks has until it execs
}

// initOOM is this process's, when it is a sandbox init.
var initOOM oomScore

// read reads this process's /proc/self/oom_score_adj. A failure leaves
// it unknown: commands then keep the init's score, as before
// CommandOOMScoreAdj existed.
func (o *oomScore) read() {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return
	}
	base, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return
	}
	o.known, o.base = true, base
	if b, err := os.ReadFile("/proc/self/comm"); err == nil {
		o.comm = strings.TrimSuffix(string(b), "\n")
	}
}

// commands is the score of the init's commands.
func (o *oomScore) commands() int { return min(o.base+CommandOOMScoreAdj, 1000) }

// raise gives pid, a process this init forked that has exec'd path (and
// has not been reaped: the pid is still its), the commands' score. It
// runs on an unrestricted thread of the init: the commands' Landlock
// domain refuses writes to /proc. After its exec the process has a memory
// map of its own, so the score is its alone (written before, while it
// shared the init's, the kernel would have given it to the init too).
//
// The exec may not be over yet: the kernel applies close-on-exec (which
// ends the fork's wait) before it makes the new image dumpable, and until
// then the process's /proc files belong to root, as the init's do, and
// refuse the init (EACCES). Its name (comm) changes just after, so a
// refusal while the name is still the init's is waited out (bounded);
// one with the new name (or any other: it may have exec'd again, or
// renamed itself) is final: a process non-dumpable for good (an
// unreadable binary) keeps the init's score, and the error says so.
func (o *oomScore) raise(pid int, path string) error {
	if !o.known || o.commands() == o.base {
		return nil
	}
	file := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	comm := filepath.Base(path)
	if len(comm) > 15 { // TASK_COMM_LEN - 1
		comm = comm[:15]
	}
	deadline := time.Now().Add(2 * time.Second)
	for delay := 20 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		now := strings.TrimSuffix(string(name), "\n")
		execDone := now == comm || (now != "" && now != o.comm)
		fd, err := unix.Open(file, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte(strconv.Itoa(o.commands())))
			unix.Close(fd)
			if err != nil {
				return os.NewSyscallError("write oom_score_adj", err)
			}
			o.raiseDescendants(pid)
			return nil
		}
		if err != unix.EACCES || execDone || time.Now().After(deadline) {
			return os.NewSyscallError("open oom_score_adj", err)
		}
		time.Sleep(delay)
	}
}

// maxRaisedDescendants bounds raiseDescendants' walk.
const maxRaisedDescendants = 64

// raiseDescendants gives the commands' score to what pid forked before
// it had that score itself, which kept the init's: pid's children (of
// every thread), theirs, and so on, maxRaisedDescendants at most (a
// command's first microseconds rarely fork any). Each is raised before
// its own children are listed, so that whatever any of them forks
// meanwhile inherits the score. A process it may not write (one that
// made itself non-dumpable) is passed over, its children still walked.
func (o *oomScore) raiseDescendants(pid int) {
	score := []byte(strconv.Itoa(o.commands()))
	queue, seen := []int{pid}, 0
	for len(queue) > 0 && seen < maxRaisedDescendants {
		p := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			continue
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				child, err := strconv.Atoi(f)
				if err != nil || seen >= maxRaisedDescendants {
					continue
				}
				seen++
				if fd, err := unix.Open(fmt.Sprintf("/proc/%d/oom_score_adj", child), unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
					_, _ = unix.Write(fd, score)
					unix.Close(fd)
				}
				queue = append(queue, child)
			}
		}
	}
}
