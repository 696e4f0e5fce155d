package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestV1Lifecycle(t *testing.T) {
	h := requireV1(t)
	ctx := ctxT(t)
	c, err := Create(h, testName(), Limits{Memory: 64 << 20, Pids: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	if c.Version() != V1 {
		t.Fatalf("Version = %v, want v1 on this %s host", c.Version(), h.Mode)
	}
	if fd, ok := c.FD(); ok || fd != -1 {
		t.Errorf("FD = %d, %v; want -1, false on v1", fd, ok)
	}
	if len(c.Paths()) != len(v1Wanted) {
		t.Errorf("Paths = %q, want one per controller %q", c.Paths(), v1Wanted)
	}

	mem, _ := c.dirFor("memory")
	pids, _ := c.dirFor("pids")
	cpu, _ := c.dirFor("cpu")
	freezer, _ := c.dirFor("freezer")
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(mem, "memory.limit_in_bytes"), "67108864"},
		{filepath.Join(pids, "pids.max"), "80"}, // 16 and InitPidsAllowance
		{filepath.Join(pids, CommandsName, "pids.max"), "16"},
		{filepath.Join(cpu, "cpu.cfs_period_us"), "100000"},
		{filepath.Join(cpu, "cpu.cfs_quota_us"), "50000"},
		{filepath.Join(freezer, "freezer.state"), "THAWED"},
	} {
		if got := readTrim(t, tc.path); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.path, got, tc.want)
		}
	}
	if memsw := filepath.Join(mem, "memory.memsw.limit_in_bytes"); fileExists(memsw) {
		if got := readTrim(t, memsw); got != "67108864" {
			t.Errorf("%s = %q, want 67108864 (no swap)", memsw, got)
		}
	} else {
		t.Logf("no swap accounting: %s absent", memsw)
	}

	cmd := startSleep(t, nil)
	pid := cmd.Process.Pid
	if err := c.AddProc(pid); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Paths() {
		if got := procsOf(t, d); !slices.Contains(got, pid) {
			t.Errorf("%s/cgroup.procs = %v, want %d in it", d, got, pid)
		}
	}
	if line := selfCgroupLine(t, pid, "memory"); !strings.HasSuffix(line, "/"+filepath.Base(mem)) {
		t.Errorf("/proc/%d/cgroup memory line %q does not name the sandbox cgroup", pid, line)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids != 1 || st.OOMKills != 0 {
		t.Errorf("Stats = %+v, want Pids 1 and no OOM kill", st)
	}

	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(freezer, "freezer.state")); got != "FROZEN" {
		t.Errorf("freezer.state after Freeze = %q", got)
	}
	if err := c.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(freezer, "freezer.state")); got != "THAWED" {
		t.Errorf("freezer.state after Thaw = %q", got)
	}

	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, cmd)
	for _, d := range c.Paths() {
		if got := procsOf(t, d); len(got) != 0 {
			t.Errorf("%s/cgroup.procs = %v after Kill, want empty", d, got)
		}
	}

	// A child cgroup made inside the sandbox's does not stop Destroy.
	if err := os.Mkdir(filepath.Join(mem, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Paths() {
		if fileExists(d) {
			t.Errorf("%s exists after Destroy", d)
		}
	}
	if err := c.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

// TestV1KillEscapees: Kill reaches processes that left the process tree
// (double fork, setsid) and a process frozen at the time.
func TestV1KillEscapees(t *testing.T) {
	h := requireV1(t)
	ctx := ctxT(t)
	c, err := Create(h, testName(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	g := startGated(t, exec.Command("sh", "-c", `read go; (setsid sleep 31 &); sleep 32 & exec sleep 30`))
	if err := c.AddProc(g.Process.Pid); err != nil {
		t.Fatal(err)
	}
	g.release(t)
	freezer, _ := c.dirFor("freezer")
	// Wait for the steady state: three sleeps and nothing else (the
	// subshell that double-forks exits, sh becomes sleep 30).
	sleeps := func() (n int, all []int) {
		all = procsOf(t, freezer)
		for _, pid := range all {
			if comm, err := readFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && comm == "sleep\n" {
				n++
			}
		}
		return n, all
	}
	deadline := time.Now().Add(5 * time.Second)
	for n, all := sleeps(); n != 3 || len(all) != 3; n, all = sleeps() {
		if time.Now().After(deadline) {
			t.Fatalf("cgroup holds %v, %d of them sleeps; want 3 sleeps", all, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	waitKilled(t, g.Cmd)
	for _, d := range c.Paths() {
		if got := procsOf(t, d); len(got) != 0 {
			t.Errorf("%s/cgroup.procs = %v after Kill", d, got)
		}
	}
	if got := readTrim(t, filepath.Join(freezer, "freezer.state")); got != "THAWED" {
		t.Errorf("freezer.state after Kill = %q, want THAWED", got)
	}
}

func TestV1OOM(t *testing.T) {
	h := requireV1(t)
	c, err := Create(h, testName(), Limits{Memory: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=alloc")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	g := startGated(t, cmd)
	if err := c.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	g.release(t)
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Fatalf("helper allocating 200 MiB under 32 MiB: %v, want SIGKILL; output:\n%s", err, out.Bytes())
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills < 1 || st.MemoryPeak <= 0 {
		t.Errorf("Stats = %+v, want at least one OOM kill and a peak", st)
	}
	if st.MemoryPeak > 40<<20 {
		t.Errorf("MemoryPeak %d is above the 32 MiB limit", st.MemoryPeak)
	}
	if n, err := c.OOMKills(); err != nil || n != st.OOMKills {
		t.Errorf("OOMKills() = %d, %v; Stats says %d", n, err, st.OOMKills)
	}
	t.Logf("stats after OOM: %+v", st)
}

func TestV1Pids(t *testing.T) {
	h := requireV1(t)
	ctx := ctxT(t)
	c, err := Create(h, testName(), Limits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	// dash stops at the first fork that fails ("Cannot fork").
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=reaper",
		scriptEnv+`=read go; i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done; wait`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g := startGated(t, cmd)
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("reaper printed no pid: %v", lines.Err())
	}
	shell, err := strconv.Atoi(lines.Text())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddProc(shell); err != nil {
		t.Fatal(err)
	}
	// The limit is the commands child's (as a sandbox's restricted
	// thread joins it).
	pidsDir, _ := c.dirFor("pids")
	if err := writeFile(filepath.Join(pidsDir, CommandsName, "cgroup.procs"), strconv.Itoa(shell)); err != nil {
		t.Fatal(err)
	}
	g.release(t) // the shell reads it
	if !lines.Scan() || lines.Text() == "sh 0" {
		t.Fatalf("shell: %q, want a failure", lines.Text())
	}
	shellExit := lines.Text()
	pids, _ := c.dirFor("pids")
	if n, err := readKeyed(filepath.Join(pids, CommandsName, "pids.events"), "max"); err != nil || n < 1 {
		t.Errorf("pids.events max = %d, %v; want forks refused (EAGAIN)", n, err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids < 1 || st.Pids > 8 {
		t.Errorf("Stats.Pids = %d, want 1..8 sleeps left", st.Pids)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Paths() {
		if got := procsOf(t, d); len(got) != 0 {
			t.Errorf("%s/cgroup.procs = %v after Kill", d, got)
		}
	}
	// The reaper exits once it has reaped every killed sleep.
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reaper: %v; stderr:\n%s", err, stderr.Bytes())
	}
	t.Logf("%s; stderr: %s", shellExit, bytes.TrimSpace(stderr.Bytes()))
	if st, _ := c.Stats(); st.Pids != 0 {
		t.Errorf("Stats.Pids after Kill and reaping = %d", st.Pids)
	}
}

// TestV1CreateAllOrNothing: when the last hierarchy's directory cannot be
// made (it already exists), the ones made before are removed and the
// existing one is left alone.
func TestV1CreateAllOrNothing(t *testing.T) {
	h := requireV1(t)
	name := testName()
	freezerOwn, err := h.dir("freezer")
	if err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(freezerOwn, name)
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(existing) })
	_, err = Create(h, name, Limits{Memory: 1 << 30})
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create over an existing cgroup: %v, want EEXIST", err)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		own, _ := h.dir(c)
		if p := filepath.Join(own, name); fileExists(p) {
			t.Errorf("%s left behind by a failed Create", p)
		}
	}
	if !fileExists(existing) {
		t.Error("Create removed a cgroup it did not make")
	}
}

func TestCanCreateHere(t *testing.T) {
	requireV1(t)
	h, err := Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	v, err := CanCreate(h)
	if err != nil || v != V1 {
		t.Errorf("CanCreate = %v, %v; want v1 on this %s host", v, err, h.Mode)
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("CanCreate left %q", left)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
