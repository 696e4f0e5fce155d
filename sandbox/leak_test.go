package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	// A private temporary directory, so that only these runs count: other
	// packages' tests create and remove files in the shared one meanwhile.
	t.Setenv("TMPDIR", t.TempDir())
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
	_, _, _ = run(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: "/nonexistent", Target: "/x"}}}}, "true")
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
	if !slices.Equal(tmpAfter, tmp) {
		t.Errorf("temporary directory: %v before, %v after", tmp, tmpAfter)
	}
	assertNoProcess(t, "sleep", "0.3")
}

// hostState is what a sandbox could leak in the process that owns it.
type hostState struct {
	fds, goroutines, children int
	// mounts are the host mounts a sandbox of this test could leave:
	// those beneath the (private) temporary directory or naming tent.
	// Other packages' tests, running meanwhile in the same mount
	// namespace, may add and remove mounts of their own elsewhere.
	mounts []string
	temp   []string // entries of the temporary directory
}

func readHostState(t *testing.T) hostState {
	t.Helper()
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	temp, err := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(line, os.TempDir()) || strings.Contains(line, "tent") {
			mounts = append(mounts, line)
		}
	}
	return hostState{
		fds:        openFDs(t),
		goroutines: runtime.NumGoroutine(),
		mounts:     mounts,
		children:   len(childPIDs(t)),
		temp:       temp,
	}
}

// childPIDs lists this process's children, zombies included.
func childPIDs(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupDirs lists the sandbox cgroups (tent-*) under parents.
func cgroupDirs(parents []string) map[string]bool {
	out := map[string]bool{}
	for _, p := range parents {
		dirs, _ := filepath.Glob(filepath.Join(p, "tent-*"))
		for _, d := range dirs {
			out[d] = true
		}
	}
	return out
}

func TestNothingLeaksAcross100Sandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("100 provision-exec-terminate cycles")
	}
	// A private temporary directory (the cow layers go there), reachable
	// by a root caller's sandbox user, so that only these sandboxes count.
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", tmp)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/work", Access: sandbox.CopyOnWrite}}}}
	cycle := func() (cgroups, layers []string) {
		t.Helper()
		sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("exec /bin/true: %+v, %v", res, err)
		}
		for _, l := range sb.Info().Layers {
			layers = append(layers, l.Upper)
		}
		if err := sb.Terminate(context.Background()); err != nil {
			t.Fatalf("terminate: %v", err)
		}
		return sb.Info().CgroupPaths, layers
	}
	// A root caller's cow lower layer is idmapped, which some filesystems
	// cannot do (tmpfs before Linux 6.3): then cycle without the mount.
	if sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{}); err != nil {
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "idmap") {
			t.Fatal(err)
		}
		t.Logf("no cow mount in the cycles: %v", err)
		spec.Mounts = nil
	} else if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Warm up once (lazily created state such as the compiled profile),
	// and find where sandbox cgroups go.
	warm, _ := cycle()
	var parents []string
	for _, c := range warm {
		parents = append(parents, filepath.Dir(c))
	}
	if privileged() && len(parents) == 0 {
		t.Fatal("root sandboxes reported no cgroup")
	}
	// The warm-up's last goroutines and children may still be winding
	// down: the state before is one that holds still for 20 ms.
	before := readHostState(t)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		again := readHostState(t)
		if again.goroutines == before.goroutines && again.children == before.children {
			break
		}
		before = again
	}
	cgBefore := cgroupDirs(parents)

	start := time.Now()
	ours := map[string]bool{}
	var layers []string
	for i := 0; i < 100; i++ {
		cgs, ls := cycle()
		for _, c := range cgs {
			ours[c] = true
		}
		layers = append(layers, ls...)
	}
	t.Logf("100 cycles in %s", time.Since(start))

	// Goroutines and children may take a moment to wind down.
	after := readHostState(t)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && (after.goroutines > before.goroutines || after.children > before.children); {
		time.Sleep(10 * time.Millisecond)
		after = readHostState(t)
	}
	compareHostState(t, before, after)
	for _, l := range layers {
		if _, err := os.Stat(l); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cow layer %s left behind (%v)", l, err)
		}
	}
	// Other processes (other packages' tests) may add and remove sandbox
	// cgroups beside ours meanwhile: every one of ours must be gone, and
	// the others are left out of the comparison.
	if privileged() && len(ours) < 100 {
		t.Errorf("root sandboxes reported %d cgroups for 100 cycles", len(ours))
	}
	cgAfter := cgroupDirs(parents)
	for c := range ours {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind (%v)", c, err)
		}
	}
	for c := range cgBefore {
		if !cgAfter[c] {
			t.Logf("cgroup %s (another process's) went away meanwhile", c)
		}
	}
	for c := range cgAfter {
		if !cgBefore[c] && !ours[c] {
			t.Logf("cgroup %s (another process's) appeared meanwhile", c)
		}
	}
}

// compareHostState reports what differs between the host's state before
// and after: descriptors, goroutines, mounts, children, temporary files.
func compareHostState(t *testing.T, before, after hostState) {
	t.Helper()
	if after.fds != before.fds {
		t.Errorf("descriptors: %d before, %d after", before.fds, after.fds)
	}
	if after.goroutines != before.goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", before.goroutines, after.goroutines, buf[:runtime.Stack(buf, true)])
	}
	if !slices.Equal(after.mounts, before.mounts) {
		t.Errorf("mounts of the temporary directory or naming tent:\n%s\nbefore, after:\n%s", strings.Join(before.mounts, "\n"), strings.Join(after.mounts, "\n"))
	}
	if after.children != before.children {
		t.Errorf("child processes: %d before, %d after (%v)", before.children, after.children, childPIDs(t))
	}
	if !slices.Equal(after.temp, before.temp) {
		t.Errorf("temporary directory: %v before, %v after", before.temp, after.temp)
	}
}
