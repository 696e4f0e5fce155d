package namespaces

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Reading processes from /proc.
//
// A process's /proc/PID/stat and /proc/PID/cmdline describe its first
// thread. While a multithreaded process execs from another thread (a Go
// program's syscall.Exec usually does: tent's supervisor handing off to
// its idle holder), the kernel first ends every other thread, the first
// one included, and only then gives the exec'ing thread the process's
// pid. Meanwhile /proc/PID/stat reads "Z" and /proc/PID/cmdline reads
// empty, though the process lives on. So whether a process runs is asked
// of all its threads ([ProcessRuns]), and which process a pid is, of its
// start time ([StartTicks]), which the exec keeps (the exec'ing thread
// takes over the first thread's).

// procStat is what is read of a process from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte
	start                uint64
}

// readProcStat parses /proc/PID/stat.
func readProcStat(pid int) (procStat, bool) {
	return parseStat(pid, "/proc/"+strconv.Itoa(pid)+"/stat")
}

// parseStat parses a stat file of pid (the command name may hold spaces
// and parentheses: fields are counted after the last ')').
func parseStat(pid int, path string) (procStat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	st := procStat{pid: pid, state: f[0][0]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgrp, _ = strconv.Atoi(f[2])
	st.sid, _ = strconv.Atoi(f[3])
	st.start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, true
}

// StartTicks returns the start time of process pid (clock ticks since
// boot, proc(5) stat field 22), 0 if unknown. With the pid it names one
// process: a recycled pid has another start time, and an exec keeps it.
func StartTicks(pid int) uint64 {
	st, _ := readProcStat(pid)
	return st.start
}

// ProcessRunsSince reports whether process pid runs (see ProcessRuns) and
// is the process that started at start ticks (see StartTicks), reading
// its stat once when it runs.
func ProcessRunsSince(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, ok := readProcStat(pid)
	if !ok || st.start != start {
		return false
	}
	if st.state != 'Z' && st.state != 'X' {
		return true
	}
	return ProcessRuns(pid) && StartTicks(pid) == start
}

// ProcessRuns reports whether process pid has a thread that has not
// exited: it is neither gone nor a zombie awaiting its reaper. A process
// exec'ing from a thread other than its first runs (see above), though
// its first thread reads as a zombie; and as the exec'ing thread takes
// over the pid, its own tid's files vanish. So a zombie is looked at
// three times, a millisecond apart, before it is taken for one.
func ProcessRuns(pid int) bool {
	if pid <= 0 {
		return false
	}
	for i := range 3 {
		st, ok := readProcStat(pid)
		if !ok {
			return false // gone (an exec never hides the pid itself)
		}
		if st.state != 'Z' && st.state != 'X' {
			return true
		}
		dir := fmt.Sprintf("/proc/%d/task", pid)
		tasks, _ := os.ReadDir(dir)
		for _, t := range tasks {
			if st, ok := parseStat(pid, dir+"/"+t.Name()+"/stat"); ok && st.state != 'Z' && st.state != 'X' {
				return true
			}
		}
		if i < 2 {
			time.Sleep(time.Millisecond)
		}
	}
	return false
}

// writeAfterExec writes data to /proc/PID/name of pid, a child of this
// init that has exec'd path (its fork has returned), waiting out the end
// of that exec. The kernel applies close-on-exec (which is when the fork
// returns) before it makes the new image dumpable, and until then the
// process's files are those of its non-dumpable copy of the init, which
// the init may not open (EACCES; begin_new_exec applies close-on-exec
// first on purpose). The process's name (comm) changes just after it
// becomes dumpable: a refusal while the name is still the init's is
// waited out (bounded: under the VM's software emulation the window was
// wide enough for TestSudo to fail once); one after the name changed
// (to path's base, or any other: it may have exec'd again or renamed
// itself) is final, as for a process non-dumpable for good (an
// unreadable binary). Other errors (EPERM) are not waited on.
func writeAfterExec(pid int, path, name, data string) error {
	file := fmt.Sprintf("/proc/%d/%s", pid, name)
	want := filepath.Base(path)
	if len(want) > 15 { // TASK_COMM_LEN - 1
		want = want[:15]
	}
	deadline := time.Now().Add(10 * time.Second)
	execDone := false
	for delay := 20 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		err := os.WriteFile(file, []byte(data), 0)
		if !errors.Is(err, syscall.EACCES) || execDone || time.Now().After(deadline) {
			return err
		}
		// Read before the next try: a name changed by then makes that
		// try's refusal final.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		comm := strings.TrimSuffix(string(b), "\n")
		if execDone = comm == want || (comm != "" && comm != selfComm()); !execDone {
			time.Sleep(delay)
		}
	}
}

// selfComm is this process's name (comm), which a child it forks keeps
// until it execs.
var selfComm = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/self/comm")
	return strings.TrimSuffix(string(b), "\n")
})
