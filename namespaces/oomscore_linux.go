package namespaces

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// oomScore is the init's OOM score adjustment, read when it starts, and
// so its commands' (see CommandOOMScoreAdj).
type oomScore struct {
	known bool // false: not an init, or /proc was not readable
	base  int
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
}

// commands is the score of the init's commands.
func (o *oomScore) commands() int { return min(o.base+CommandOOMScoreAdj, 1000) }

// raise gives pid, a process this init forked that has exec'd path (and
// has not been reaped: the pid is still its), the commands' score, then
// raises what it forked meanwhile. It runs on an unrestricted thread of
// the init: the commands' Landlock domain refuses writes to /proc. After
// its exec the process has a memory map of its own, so the score is its
// alone (written before, while it shared the init's, the kernel would
// have given it to the init too). A process non-dumpable for good (an
// unreadable binary, see writeAfterExec) keeps the init's score, and the
// error says so.
func (o *oomScore) raise(pid int, path string) error {
	if !o.known || o.commands() == o.base {
		return nil
	}
	if err := writeAfterExec(pid, path, "oom_score_adj", strconv.Itoa(o.commands())); err != nil {
		return err
	}
	o.raiseDescendants(pid)
	return nil
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
	// Each a fork of a process that has exec'd: dumpable unless it made
	// itself otherwise, no exec to wait out.
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
				_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", child), score, 0)
				queue = append(queue, child)
			}
		}
	}
}
