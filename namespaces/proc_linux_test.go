package namespaces

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadExecEnv makes this test binary a program that execs `sleep 30`
// from a thread other than its first while eight more threads run: what
// tent's supervisor does when it hands off to its idle holder.
const threadExecEnv = "TENT_TEST_THREAD_EXEC"

func init() {
	if os.Getenv(threadExecEnv) == "" {
		return
	}
	for range 8 {
		go func() {
			runtime.LockOSThread()
			for {
				runtime.Gosched()
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	go func() {
		runtime.LockOSThread() // not the first thread: init runs on that one
		err := syscall.Exec("/bin/sleep", []string{"sleep", "30"}, nil)
		panic(err)
	}()
	select {}
}

// A process exec'ing from a thread other than its first reads as a
// zombie with an empty command line until the exec is done; it runs all
// along, and keeps its start time. Once, tent ls could reconcile a live
// sandbox to "stopped" (and tent rm reclaim it) at that moment.
func TestProcessRunsThroughThreadExec(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Until five reads have caught an exec half-way (the first thread a
	// zombie): the test checks nothing before. One exec gives a few here.
	windows, round := 0, 0
	for ; windows < 5; round++ {
		if round == 200 {
			t.Fatal("200 execs, none caught half-way: this test checked nothing")
		}
		cmd := exec.Command(self, "-test.run", "^$")
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), threadExecEnv+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		var start uint64
		for start == 0 {
			start = StartTicks(pid)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			cmdline := readCmdline(pid)
			st, _ := readProcStat(pid)
			if !ProcessRunsSince(pid, start) {
				t.Fatalf("round %d: ProcessRunsSince: a process exec'ing (stat %q, cmdline %q) reads as not running, or as another",
					round, st.state, cmdline)
			}
			if ProcessRunsSince(pid, start+1) {
				t.Fatalf("round %d: ProcessRunsSince takes another start time for this process's", round)
			}
			if !ProcessRuns(pid) || StartTicks(pid) != start {
				t.Fatalf("round %d: a process exec'ing (stat %q, cmdline %q, threads %v) reads as not running, or as another",
					round, st.state, cmdline, threadStates(pid))
			}
			if st.state == 'Z' {
				windows++
			}
			if strings.HasPrefix(cmdline, "sleep\x00") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no exec of sleep: %q", round, cmdline)
			}
		}
		if got := StartTicks(pid); got != start {
			t.Errorf("round %d: the exec changed the start time from %d to %d", round, start, got)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for ProcessRuns(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if ProcessRuns(pid) || ProcessRunsSince(pid, start) {
			t.Errorf("round %d: a killed process (a zombie) reads as running", round)
		}
		_ = cmd.Wait()
		if ProcessRuns(pid) || ProcessRunsSince(pid, start) {
			t.Errorf("round %d: a reaped process reads as running", round)
		}
	}
	t.Logf("%d reads caught an exec half-way, in %d execs", windows, round)
}

// The command name may hold spaces and parentheses, even ") R 1 2 3":
// the fields are counted after the last ')'.
func TestParseStat(t *testing.T) {
	dir := t.TempDir()
	// State S, ppid 41, pgrp 42, sid 43, fields 7 to 21, start 123456 (22).
	const tail = " S 41 42 43 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456 19 20\n"
	for _, comm := range []string{"sleep", "a b", "x) R 1 2 3 (y", "((", "))", ""} {
		p := filepath.Join(dir, "stat")
		if err := os.WriteFile(p, []byte("77 ("+comm+")"+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		st, ok := parseStat(77, p)
		want := procStat{pid: 77, ppid: 41, pgrp: 42, sid: 43, state: 'S', start: 123456}
		if !ok || st != want {
			t.Errorf("comm %q: %+v, %v; want %+v", comm, st, ok, want)
		}
	}
	for name, content := range map[string]string{
		"no parenthesis": "77 sleep" + tail,
		"too few fields": "77 (sleep) S 41 42 43 4 5 6",
		"empty":          "",
	} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if st, ok := parseStat(77, p); ok || st != (procStat{}) {
			t.Errorf("%s: %+v, %v; want nothing", name, st, ok)
		}
	}
	if st, ok := parseStat(77, filepath.Join(dir, "missing")); ok || st != (procStat{}) {
		t.Errorf("a missing file: %+v, %v", st, ok)
	}
}

// This process's own stat, read through /proc, matches what the system
// calls say of it.
func TestReadProcStatOfSelf(t *testing.T) {
	pid := os.Getpid()
	st, ok := readProcStat(pid)
	pgrp, _ := syscall.Getpgid(pid)
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if !ok || st.pid != pid || st.ppid != os.Getppid() || st.pgrp != pgrp || errno != 0 || st.sid != int(sid) || (st.state != 'R' && st.state != 'S') || st.start == 0 {
		t.Errorf("readProcStat(self) = %+v, %v; want pid %d, ppid %d, pgrp %d, sid %d, state R or S, a start time", st, ok, pid, os.Getppid(), pgrp, sid)
	}
	if StartTicks(pid) != st.start {
		t.Errorf("StartTicks(self) = %d, want %d", StartTicks(pid), st.start)
	}
	for _, pid := range []int{0, -1} {
		if ProcessRuns(pid) || StartTicks(pid) != 0 {
			t.Errorf("pid %d: runs %v, start %d; want false, 0", pid, ProcessRuns(pid), StartTicks(pid))
		}
	}
}

// threadStates lists pid's threads as "TID:STATE".
func threadStates(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		st, _ := parseStat(pid, dir+e.Name()+"/stat")
		out = append(out, e.Name()+":"+string(st.state))
	}
	return out
}

func readCmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(b)
}
