package namespaces

import (
	"os/exec"
	"syscall"
	"testing"
)

// peekEnd says how a child ended without reaping it: its waiter still
// gets the status. A child still running, or not this process's, gives
// "".
func TestPeekEnd(t *testing.T) {
	for _, c := range []struct {
		script string
		kill   bool
		want   string
		status string
	}{
		{"exit 3", false, "exit status 3", "exit status 3"},
		{"sleep 100", true, "signal: killed", "signal: killed"},
	} {
		cmd := exec.Command("sh", "-c", c.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if c.kill {
			if got := peekEnd(cmd.Process.Pid); got != "" {
				t.Errorf("%s, running: %q, want \"\"", c.script, got)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		var got string
		for range 100 { // 10 s at most: the child ends at once
			if got = peekEnd(cmd.Process.Pid); got != "" {
				break
			}
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.script, got, c.want)
		}
		if err := cmd.Wait(); err == nil || err.Error() != c.status {
			t.Errorf("%s: its waiter got %v, want %s (peekEnd must not reap)", c.script, err, c.status)
		}
		if got := peekEnd(cmd.Process.Pid); got != "" {
			t.Errorf("%s, reaped: %q, want \"\"", c.script, got)
		}
	}
	if got := peekEnd(1); got != "" {
		t.Errorf("pid 1, not a child: %q", got)
	}
}
