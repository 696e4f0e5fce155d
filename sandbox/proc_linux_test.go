package sandbox

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadExecEnv makes this test binary a program that execs `sleep 30`
// from a thread other than its first while eight more threads run: what
// the supervisor does when it hands off to its idle holder.
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
// along, and is the same supervisor. Once, tent ls could reconcile a
// live sandbox to "stopped" (and tent rm reclaim it) at that moment.
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
		cmd.Env = append(os.Environ(), threadExecEnv+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		var start uint64
		for start == 0 {
			start = procStartTicks(pid)
		}
		rec := &Record{ID: "no-such-id", Supervisor: pid, SupervisorStart: start}
		deadline := time.Now().Add(10 * time.Second)
		for {
			cmdline := readCmdline(pid)
			st, _ := readProcStat(pid)
			if !processRuns(pid) || !supervisorAlive(rec) {
				t.Fatalf("round %d: a process exec'ing (stat %q, cmdline %q, threads %v) reads as not running",
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
		if got := procStartTicks(pid); got != start {
			t.Errorf("round %d: the exec changed the start time from %d to %d", round, start, got)
		}
		if other := (&Record{Supervisor: pid, SupervisorStart: start + 1}); supervisorAlive(other) {
			t.Errorf("round %d: a record with another start time names the process", round)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for processRuns(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if processRuns(pid) || supervisorAlive(rec) {
			t.Errorf("round %d: a killed process (a zombie) reads as running", round)
		}
		_ = cmd.Wait()
		if processRuns(pid) {
			t.Errorf("round %d: a reaped process reads as running", round)
		}
	}
	t.Logf("%d reads caught an exec half-way, in %d execs", windows, round)
}

// A record written before the start time was kept is matched by its id
// in the supervisor's command line.
func TestSupervisorAliveByCommandLine(t *testing.T) {
	// The shell's builtin read waits on the pipe: the process stays as it
	// is, "tent-test-id" its $0.
	cmd := exec.Command("/bin/sh", "-c", "read x", "tent-test-id")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	for !strings.Contains(readCmdline(pid), "tent-test-id") {
		time.Sleep(time.Millisecond)
	}
	if !supervisorAlive(&Record{ID: "tent-test-id", Supervisor: pid}) {
		t.Error("its id in the command line: not alive")
	}
	if supervisorAlive(&Record{ID: "another-id", Supervisor: pid}) {
		t.Error("another id: alive")
	}
	if supervisorAlive(&Record{ID: "tent-test-id"}) {
		t.Error("no pid: alive")
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
