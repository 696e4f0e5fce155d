//go:build linux

package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestInitSurvivesHostSignals: a host process's signals other than
// SIGKILL and SIGSTOP do not end or stop a running Go init. It catches
// the ones the Go runtime would die of, or stop at, once its command has
// started (namespaces' catchSignals, in a goroutine); the runtime ignores
// SIGUSR1 and SIGUSR2 by itself. Each of these would end, or stop, an
// ordinary process.
func TestInitSurvivesHostSignals(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"true"}}); res.ExitCode != 0 {
		t.Fatalf("first exec: %+v", res)
	}
	pid := sb.Info().InitPID
	caught := []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGCHLD, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}
	// The runtime's signal thread unblocks each signal os/signal catches:
	// wait for the one thread of the init that blocks SIGUSR1 but none
	// of these.
	if !waitFor(60*time.Second, func() bool { return signalThreadCatches(pid, caught) }) {
		t.Fatalf("the init's signal thread never caught %v", caught)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("kill %v: %v", sig, err)
		}
	}
	out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"echo", "still here"}})
	if res.ExitCode != 0 || out != "still here" {
		t.Fatalf("exec after the signals: %q %+v", out, res)
	}
	if st := procState(t, pid); st != "S" && st != "R" {
		t.Errorf("the init's state is %q after the signals, want running or sleeping", st)
	}
	if got := sb.Info().InitPID; got != pid {
		t.Errorf("the init's pid changed from %d to %d", pid, got)
	}
}

// signalThreadCatches reports whether a thread of pid blocks SIGUSR1 and
// none of sigs: os/signal's thread, once it catches them.
func signalThreadCatches(pid int, sigs []syscall.Signal) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil {
		return false
	}
	for _, status := range tasks {
		b, err := os.ReadFile(status)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			hex, ok := strings.CutPrefix(line, "SigBlk:")
			if !ok {
				continue
			}
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil || mask&(1<<(syscall.SIGUSR1-1)) == 0 {
				continue
			}
			all := true
			for _, s := range sigs {
				all = all && mask&(1<<(s-1)) == 0
			}
			if all {
				return true
			}
		}
	}
	return false
}

// procState is the state letter of pid (/proc/PID/stat).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		t.Fatalf("unreadable stat %q", s)
	}
	return s[i+2 : i+3]
}
