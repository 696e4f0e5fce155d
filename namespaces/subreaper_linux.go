package namespaces

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Finding a command's descendants without a cgroup (tent's reduced tier).
//
// The command starts in a session and process group of its own (setsid),
// which its descendants inherit unless they call setsid or setpgid. While
// a run without a cgroup is active, the host process is a child subreaper
// (PR_SET_CHILD_SUBREAPER, [AcquireSubreaper]): an orphaned descendant is
// reparented to it instead of to the system's init. [KillTree] kills, in
// rounds until none is left: every process of the command's session or
// process group; every child of the host process started after the
// command with no_new_privs set (the reduced tier sets it on everything
// it starts, ordinary children of the host rarely have it); and every
// descendant of those. Limits, stated honestly: a descendant that leaves
// the session and the process group is found only while its parent lives
// or once it has been reparented to the host; with several such runs at
// once in one process, such orphans cannot be told apart, and one run's
// kill may take another's; a process that the host process started
// itself with no_new_privs after the command may be taken too. A cgroup
// has none of these limits: tent uses one whenever it can.

var subreaper struct {
	sync.Mutex
	n int
}

// AcquireSubreaper makes this process a child subreaper while at least
// one caller holds it: the first acquisition sets PR_SET_CHILD_SUBREAPER.
// Every call must be paired with one of [ReleaseSubreaper].
func AcquireSubreaper() {
	subreaper.Lock()
	defer subreaper.Unlock()
	if subreaper.n == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	subreaper.n++
}

// ReleaseSubreaper drops one hold of [AcquireSubreaper]; the last one
// clears PR_SET_CHILD_SUBREAPER.
func ReleaseSubreaper() {
	subreaper.Lock()
	defer subreaper.Unlock()
	subreaper.n--
	if subreaper.n == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
}

func noNewPrivs(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && bytes.Contains(b, []byte("\nNoNewPrivs:\t1\n"))
}

// KillTree SIGKILLs the command cmd, a child of this process that leads
// its own session, started at startTicks ([StartTicks]), and its
// descendants as described above, then reaps those that became children
// of this process (cmd itself is left to its waiter).
func KillTree(cmd int, startTicks uint64) {
	self := os.Getpid()
	killed := map[int]bool{}
	for round := 0; round < 100; round++ {
		procs := scanProcs()
		in := map[int]bool{}
		for _, p := range procs {
			switch {
			case p.pid == self:
			case p.sid == cmd || p.pgrp == cmd || p.pid == cmd:
				in[p.pid] = true
			case p.ppid == self && startTicks > 0 && p.start >= startTicks && (killed[p.pid] || noNewPrivs(p.pid)):
				in[p.pid] = true
			}
		}
		for grew := true; grew; {
			grew = false
			for _, p := range procs {
				if !in[p.pid] && in[p.ppid] && p.pid != self {
					in[p.pid], grew = true, true
				}
			}
		}
		live := 0
		for _, p := range procs {
			if !in[p.pid] {
				continue
			}
			if p.state != 'Z' {
				live++
				_ = unix.Kill(p.pid, unix.SIGKILL)
			}
			killed[p.pid] = true
			if p.ppid == self && p.pid != cmd {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
			}
		}
		if live == 0 && round > 0 {
			break
		}
		time.Sleep(time.Duration(min(round+1, 10)) * time.Millisecond)
	}
}

// scanProcs reads every process's stat.
func scanProcs() []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}
