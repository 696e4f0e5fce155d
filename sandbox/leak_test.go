package sandbox_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestSandboxDiesWithItsOwner(t *testing.T) {
	before := map[string]bool{}
	for _, c := range tentCgroups() {
		before[c] = true
	}
	// A SIGKILLed owner cannot remove its cgroup (a later run reaps it
	// once stale); remove it here so the suite leaves nothing behind.
	defer func() {
		for _, c := range tentCgroups() {
			if !before[c] {
				if err := os.Remove(c); err != nil {
					t.Errorf("the killed sandbox's cgroup: %v", err)
				}
			}
		}
	}()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), "TENT_TEST_HOST_HELPER=1")
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "started" {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper: %q", line)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	assertNoProcess(t, "sleep", "307") // within one second
}

// openFDs counts this process's descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// tentCgroups lists cgroup directories tent created under our cgroups.
func tentCgroups() []string {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/tent-*")
	more, _ := filepath.Glob("/sys/fs/cgroup/*/*/*/tent-*")
	uni, _ := filepath.Glob("/sys/fs/cgroup/tent-*")
	return append(append(matches, more...), uni...)
}

func TestNothingLeaksAcrossRuns(t *testing.T) {
	// Warm up once (lazily created state such as the compiled profile).
	mustRun(t, sandbox.Spec{}, "true")
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	cgroupsBefore := len(tentCgroups())
	tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	for i := 0; i < 20; i++ {
		spec := sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Second}}
		if i%2 == 0 {
			spec.Limits.Timeout = 100 * time.Millisecond
		}
		cmd := sandbox.Command(context.Background(), spec, "sh", "-c", "sleep 0.3 & echo $$")
		_, _ = cmd.Output()
	}
	// A failed start must not leave anything either.
	_, _, _ = run(t, sandbox.Spec{}, "/nonexistent")
	_, _, _ = run(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/nonexistent", Target: "/x"}}}, "true")
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("descriptors: %d before, %d after", fds, n)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
	if n := len(tentCgroups()); n > cgroupsBefore {
		t.Errorf("cgroups: %d before, %d after: %v", cgroupsBefore, n, tentCgroups())
	}
	tmpAfter, _ := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	if len(tmpAfter) > len(tmp) {
		t.Errorf("temporary files: %d before, %d after", len(tmp), len(tmpAfter))
	}
	assertNoProcess(t, "sleep", "0.3")
}
