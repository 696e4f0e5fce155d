package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv selects a helper mode when the test binary is re-executed as a
// child process (the os/exec helper-command pattern).
const helperEnv = "TENT_CGROUPS_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	code := m.Run()
	// Whatever a test did, nothing of ours may be left in any hierarchy.
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: cgroups left behind: %q\n", left)
		for _, d := range left {
			_ = os.Remove(d)
		}
		code = 1
	}
	os.Exit(code)
}

// scriptEnv is the shell script the "reaper" helper runs.
const scriptEnv = "TENT_CGROUPS_TEST_SCRIPT"

// runHelper is the child side of the helper processes:
//
//   - alloc waits for one byte on stdin, so the test can move it into a
//     cgroup first, then allocates and touches 200 MiB.
//   - reaper becomes a child subreaper, starts `sh -c $TENT_CGROUPS_TEST_SCRIPT`
//     with its own stdin, prints the shell's pid, then reaps every
//     descendant, printing "sh STATUS" when the shell ends, and exits once
//     none is left. Only the shell goes into the cgroup (a Go process
//     under a small pids.max could fail to start threads); the reaper makes
//     orphaned descendants' zombies go away at once, so pids.current,
//     which counts a task until it is reaped, drops to 0.
func runHelper(mode string) int {
	switch mode {
	case "reaper":
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "helper: PR_SET_CHILD_SUBREAPER:", err)
			return 3
		}
		sh := exec.Command("sh", "-c", os.Getenv(scriptEnv))
		sh.Stdin, sh.Stderr = os.Stdin, os.Stderr
		if err := sh.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 3
		}
		fmt.Println(sh.Process.Pid)
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return 0 // ECHILD: every descendant is reaped
			}
			if pid == sh.Process.Pid {
				fmt.Println("sh", ws.ExitStatus())
			}
		}
	case "alloc":
		if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
			fmt.Fprintln(os.Stderr, "helper: read go byte:", err)
			return 3
		}
		// Allocate and touch 200 MiB, one page at a time.
		var keep [][]byte
		for range 200 {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep), "MiB")
		return 0
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
	return 2
}

// testPrefix names every cgroup this test binary creates.
var testPrefix = fmt.Sprintf("tent-test-%d-", os.Getpid())

var testSeq atomic.Int64

func testName() string { return testPrefix + strconv.FormatInt(testSeq.Add(1), 10) }

// leftovers lists cgroups named with testPrefix (or probes of this process)
// under this process's own cgroup, in every hierarchy.
func leftovers() []string {
	h, err := Detect("/proc")
	if err != nil {
		return nil
	}
	var left []string
	keys := []string{""}
	for c := range h.V1Mounts {
		keys = append(keys, c)
	}
	for _, c := range keys {
		dir, err := h.dir(c)
		if err != nil {
			continue
		}
		for _, pattern := range []string{testPrefix + "*", fmt.Sprintf("tent-probe-%d-*", os.Getpid())} {
			m, _ := filepath.Glob(filepath.Join(dir, pattern))
			left = append(left, m...)
		}
	}
	slices.Sort(left)
	return slices.Compact(left)
}

// requireV1 skips unless this process can create cgroup v1 cgroups with
// every controller the tests use.
func requireV1(t *testing.T) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("creating cgroup v1 cgroups needs root here (euid %d)", os.Geteuid())
	}
	h, err := Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v1Wanted {
		if h.V1Mounts[c] == "" {
			t.Skipf("cgroup v1 %s controller is not mounted (host mode %s)", c, h.Mode)
		}
	}
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// destroyOnCleanup destroys c when the test ends and checks that its
// directories are gone.
func destroyOnCleanup(t *testing.T, c *Cgroup) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		for _, p := range c.Paths() {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still exists after Destroy (%v)", p, err)
			}
		}
	})
}

// gatedCmd is a child process that waits for a byte on stdin.
type gatedCmd struct {
	*exec.Cmd
	stdin io.WriteCloser
}

// startGated starts name args with a stdin pipe; release writes the byte.
// The process is killed and reaped when the test ends.
func startGated(t *testing.T, cmd *exec.Cmd) *gatedCmd {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatedCmd{Cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return g
}

func (g *gatedCmd) release(t *testing.T) {
	t.Helper()
	if _, err := g.stdin.Write([]byte("g\n")); err != nil {
		t.Fatal(err)
	}
	_ = g.stdin.Close()
}

// startSleep starts `sleep 30`, killed and reaped when the test ends.
func startSleep(t *testing.T, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// waitKilled reaps cmd and checks that SIGKILL ended it.
func waitKilled(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Fatalf("pid %d: Wait = %v, want death by SIGKILL", cmd.Process.Pid, err)
	}
}

// killedBySIGKILL reports whether err, from exec.Cmd.Wait, is a death by
// SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	s, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(s)
}

func procsOf(t *testing.T, dir string) []int {
	t.Helper()
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// selfCgroupLine returns the line of /proc/pid/cgroup for hierarchy key
// ("" for v2, else a controller).
func selfCgroupLine(t *testing.T, pid int, key string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && (parts[1] == key || (key != "" && slices.Contains(strings.Split(parts[1], ","), key))) {
			return parts[2]
		}
	}
	return ""
}
