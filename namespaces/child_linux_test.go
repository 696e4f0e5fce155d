package namespaces

import (
	"sync"
	"syscall"
	"testing"
)

// child reaps once and tells every caller; a kill after the reap (or
// racing it) never reaches a process that could have reused the pid.
func TestChild(t *testing.T) {
	start := func(argv ...string) *child {
		pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{})
		if err != nil {
			t.Skipf("starting %s: %v", argv[0], err)
		}
		return &child{pid: pid, pidfd: -1}
	}
	c := start("/bin/sh", "-c", "exit 3")
	ws, err := c.wait()
	if err != nil || !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("wait: %v, %s", err, describeStatus(ws))
	}
	if err := c.kill(); err != nil {
		t.Fatalf("kill after the reap: %v", err)
	}
	if ws2, err := c.wait(); err != nil || ws2 != ws {
		t.Fatalf("second wait: %v, %s", err, describeStatus(ws2))
	}

	c = start("/bin/sleep", "60")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.kill() }()
		go func() { defer wg.Done(); _, _ = c.wait() }()
	}
	wg.Wait()
	ws, err = c.wait()
	if err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("killed child: %v, %s", err, describeStatus(ws))
	}
	if got := describeStatus(ws); got != "signal: killed" {
		t.Errorf("describeStatus = %q", got)
	}
}
