package sandbox

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Why a sandbox's init ended, as its stopped record says.
func TestInitEndReason(t *testing.T) {
	for _, tc := range []struct {
		code, status int32
		ok           bool
		oom          int64
		want         string
	}{
		{cldExited, 3, true, 0, "its init exited with status 3"},
		{cldExited, 0, true, 2, "its init exited with status 0"},
		{cldKilled, int32(syscall.SIGKILL), true, 0, "its init was killed (SIGKILL)"},
		{cldDumped, int32(syscall.SIGSEGV), true, 0, "its init was killed (SIGSEGV)"},
		{cldKilled, int32(syscall.SIGKILL), true, 1, "out of memory: the OOM killer ended its init"},
		{0, 0, false, 1, "out of memory: the OOM killer ended its init"},
		{0, 0, false, 0, "its init ended"},
	} {
		if got := initEndReason(tc.code, tc.status, tc.ok, tc.oom); got != tc.want {
			t.Errorf("initEndReason(%d, %d, %v, %d) = %q, want %q", tc.code, tc.status, tc.ok, tc.oom, got, tc.want)
		}
	}
}

// waitNoReap reads a dead child's status and leaves it to be reaped.
func TestWaitNoReap(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var code, status int32
	var ok bool
	for !ok {
		if code, status, ok = waitNoReap(cmd.Process.Pid); !ok {
			time.Sleep(time.Millisecond)
		}
	}
	if code != cldExited || status != 7 {
		t.Errorf("waitNoReap: code %d status %d, want exited 7", code, status)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 7 {
		t.Errorf("the child was reaped by waitNoReap: %v", err)
	}
}
