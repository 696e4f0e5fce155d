package sandbox_test

import (
	"bufio"
	"context"
	"errors"
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
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "started" {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper: %q", line)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	assertNoProcess(t, "sleep", "307") // within one second
	// A SIGKILLed owner cannot remove its cgroup (a later run, or tent rm,
	// reaps it); it is empty, so remove it here and leave nothing behind.
	for _, c := range fields[1:] {
		var err error
		for i := 0; i < 200; i++ { // its last processes may still be exiting
			if err = os.Remove(c); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("the killed sandbox's cgroup: %v", err)
		}
	}
}

// openFDs counts this process's descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestNothingLeaksAcrossRuns(t *testing.T) {
	// Warm up once (lazily created state such as the compiled profile).
	mustRun(t, sandbox.Spec{}, "true")
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	var ours []string // the cgroups of these runs (other packages' tests may run meanwhile)
	for i := 0; i < 20; i++ {
		spec := sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Second}}
		if i%2 == 0 {
			spec.Limits.Timeout = 100 * time.Millisecond
		}
		cmd := sandbox.Command(context.Background(), spec, "sh", "-c", "sleep 0.3 & echo $$")
		_, _ = cmd.Output()
		ours = append(ours, cmd.Report.CgroupPaths...)
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
	for _, c := range ours {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind (%v)", c, err)
		}
	}
	if privileged() && len(ours) == 0 {
		t.Error("root runs reported no cgroup")
	}
	tmpAfter, _ := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	if len(tmpAfter) > len(tmp) {
		t.Errorf("temporary files: %d before, %d after", len(tmp), len(tmpAfter))
	}
	assertNoProcess(t, "sleep", "0.3")
}
