package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// canLimit reports whether this process gets real cgroup limits.
func canLimit(t *testing.T) bool {
	_, _, err := run(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}}, "true")
	return err == nil
}

func TestMemoryLimitOOMKillsAndReports(t *testing.T) {
	spec := sandbox.Spec{Limits: sandbox.Limits{Memory: 32 << 20}}
	if !canLimit(t) {
		_, _, err := run(t, spec, "true")
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "Delegate=yes") {
			t.Fatalf("without a writable cgroup: got %v, want ErrUnsupported naming delegation", err)
		}
		out, cmd, err := run(t, withProbe(t, sandbox.Spec{Limits: spec.Limits, BestEffort: true}), probeTarget+"/testprobe", "alloc", "200")
		if p, _ := protectionOf(cmd.Report, "memory"); p.Status != sandbox.Degraded {
			t.Errorf("best-effort memory limit reported as %+v (out %q, err %v)", p, out, err)
		}
		return
	}
	out, cmd, err := run(t, withProbe(t, spec), probeTarget+"/testprobe", "alloc", "200")
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || !ee.Report.OOMKilled || ee.ExitCode() != 137 {
		t.Fatalf("allocating 200 MiB under 32 MiB: err %v, out %q, report %+v", err, out, cmd.Report)
	}
	if !strings.Contains(err.Error(), "OOM") {
		t.Errorf("exit message does not say OOM: %q", err)
	}
	if cmd.Report.PeakMemory < 16<<20 || cmd.Report.PeakMemory > 40<<20 {
		t.Errorf("peak memory %d, want about the 32 MiB limit", cmd.Report.PeakMemory)
	}
}

func TestPidsLimitContainsAForkBomb(t *testing.T) {
	if !canLimit(t) {
		// Best effort: RLIMIT_NPROC, counted per user in the sandbox's user
		// namespace, still stops the bomb.
		spec := sandbox.Spec{Limits: sandbox.Limits{Pids: 16}, BestEffort: true}
		expect(t, "fork bomb under best-effort pids=16", probe(t, spec, "forkbomb"), "EAGAIN")
		assertNoProcess(t, "/bin/sleep", "271")
		return
	}
	expect(t, "fork bomb under pids=16", probe(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 16}}, "forkbomb"), "EAGAIN")
	assertNoProcess(t, "/bin/sleep", "271")
}

func TestTimeoutKillsTheWholeTree(t *testing.T) {
	// Sleepers of a length no other program on the host uses.
	sleep := fmt.Sprintf("300.%d", os.Getpid())
	start := time.Now()
	_, cmd, err := run(t, withProbe(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: 700 * time.Millisecond}}), probeTarget+"/testprobe", "orphans", sleep)
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || !ee.Report.TimedOut || ee.ExitCode() != 124 {
		t.Fatalf("got %v (report %+v), want a timeout with exit code 124", err, cmd.Report)
	}
	if d := time.Since(start); d > 100*time.Second { // the sleepers' 300 s, on any machine
		t.Errorf("the timeout took %s to end the run", d)
	}
	assertNoProcess(t, "sleep", sleep)
}

func TestCPULimitThrottles(t *testing.T) {
	if !canLimit(t) {
		t.Skip("no writable cgroup for this user")
	}
	out := probe(t, sandbox.Spec{Limits: sandbox.Limits{CPUs: 0.2}}, "spin", "1000")
	ms, err := strconv.Atoi(out)
	if err != nil {
		t.Fatal(out)
	}
	// 0.2 CPUs for 1 s of wall time: about 200 ms; unthrottled it is ~1000.
	if ms > 450 {
		t.Errorf("spinning 1 s under cpus=0.2 used %d ms of CPU", ms)
	}
}

func TestNofileLimit(t *testing.T) {
	expect(t, "opening files under nofile=16", probe(t, sandbox.Spec{Limits: sandbox.Limits{NoFile: 16}}, "nofile"), "EMFILE")
}

func TestCommandNotFoundAndNotExecutable(t *testing.T) {
	_, _, err := run(t, sandbox.Spec{}, "/nonexistent")
	if !errors.Is(err, sandbox.ErrCommandNotFound) || sandbox.ExitCode(err) != 127 {
		t.Errorf("missing command: %v (exit %d)", err, sandbox.ExitCode(err))
	}
	_, _, err = run(t, sandbox.Spec{}, "/etc/hostname")
	if !errors.Is(err, sandbox.ErrNotExecutable) || sandbox.ExitCode(err) != 126 {
		t.Errorf("not executable: %v (exit %d)", err, sandbox.ExitCode(err))
	}
	_, _, err = run(t, sandbox.Spec{}, "sh", "-c", "kill -TERM $$")
	if sandbox.ExitCode(err) != 143 {
		t.Errorf("killed by SIGTERM: %v (exit %d), want 143", err, sandbox.ExitCode(err))
	}
	_, _, err = run(t, sandbox.Spec{}, "sh", "-c", "exit 3")
	if sandbox.ExitCode(err) != 3 {
		t.Errorf("exit 3: %v", err)
	}
}

var assertNoProcess = sandboxtest.AssertNoProcess

// A command that fills the pids limit leaves the sandbox's init running,
// and execs sent while it stays full fail with EAGAIN, not with the
// sandbox. The limit is the commands' alone (a child cgroup that the
// init's restricted threads join): it counted the init's own threads
// too, and when the Go runtime could not start one it aborted the init
// ("the sandbox's init is gone": a shell starting 40 sleepers under a
// limit of 32 ended most runs with the init on one P, and 3 in 10 runs
// of 12 execs at once into a full sandbox, whatever the Ps). A limit of
// 2 runs a shell: the init's threads took about 8.
func TestPidsFullKeepsInit(t *testing.T) {
	if !canLimit(t) {
		t.Skip("no writable cgroup for this user")
	}
	ctx := context.Background()
	// Sleepers of a length no other program on the host uses.
	sleep := fmt.Sprintf("30.%d", os.Getpid())
	for round := range 3 {
		sb, err := sandbox.Provision(ctx, sandbox.Spec{Limits: sandbox.Limits{Pids: 32}}, sandbox.ProvisionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			sb.Terminate(ctx)
			t.Fatalf("round %d: "+format, append([]any{round}, args...)...)
		}
		// 40 sleepers under a limit of 32: the subshell's forks stop at
		// the limit, and the shell then becomes a sleeper too (no fork).
		fctx, cancel := context.WithCancel(ctx)
		filler := sb.Command(fctx, "sh", "-c", "(for i in $(seq 40); do sleep "+sleep+" </dev/null >/dev/null 2>&1 & done); exec sleep "+sleep)
		var fillErr bytes.Buffer
		filler.Stderr = &fillErr
		if err := filler.Start(); err != nil {
			cancel()
			fail("%v", err)
		}
		// Sleepers fill the places the subshell and its zombie leave: the
		// limit is full once three execs in a row are refused (EAGAIN).
		refused := 0
		for deadline := time.Now().Add(time.Minute); refused < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			err := sb.Command(fctx, "sleep", sleep).Start()
			switch {
			case err == nil:
				refused = 0
			case errors.Is(err, syscall.EAGAIN):
				refused++
			default:
				cancel()
				fail("an exec while the sleepers start: %v", err)
			}
		}
		if refused < 3 {
			cancel()
			fail("the limit never filled: %s", fillErr.String())
		}
		// Twelve execs at once into the full sandbox: refused, or run in
		// a place a reaped zombie left, never the sandbox's end.
		errs := make(chan error, 12)
		for range 12 {
			go func() { errs <- sb.Command(ctx, "true").Run() }()
		}
		refused = 0
		for range 12 {
			switch err := <-errs; {
			case errors.Is(err, syscall.EAGAIN):
				refused++
			case err != nil:
				t.Errorf("round %d: an exec into the full sandbox: %v, want EAGAIN", round, err)
			}
		}
		if refused == 0 {
			t.Errorf("round %d: all 12 execs ran: the limit was not full", round)
		}
		cancel()
		_ = filler.Wait()
		if !strings.Contains(fillErr.String(), "fork") {
			t.Errorf("round %d: the subshell's stderr: %q, want its fork refused", round, fillErr.String())
		}
		// The sleepers end; the sandbox then runs a command again.
		var alive []byte
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if alive, err = sb.Command(ctx, "echo", "alive").Output(); !errors.Is(err, syscall.EAGAIN) {
				break
			}
		}
		if err != nil || string(alive) != "alive\n" {
			fail("after the limit was full: %q, %v", alive, err)
		}
		if err := sb.Terminate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertNoProcess(t, "sleep", sleep)
	// Every kind of exec is in the child: a command's, and one as root
	// (forked apart, in a user namespace of its own).
	sb, err := sandbox.Provision(ctx, sandbox.Spec{Limits: sandbox.Limits{Pids: 8}}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	for _, asRoot := range []bool{false, true} {
		var out bytes.Buffer
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"cat", "/proc/self/cgroup"}, AsRoot: asRoot, Stdout: &out})
		if errors.Is(err, sandbox.ErrUnsupported) && asRoot {
			continue // no nested user namespace here
		}
		if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), ":/commands\n") {
			t.Errorf("exec (as root: %v): %q, %v; want the pids limit's child, /commands", asRoot, out.String(), err)
		}
	}
	out, _, err := run(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 2}}, "sh", "-c", "echo ok")
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Errorf("a shell under a limit of 2: %q, %v", out, err)
	}
}

// TestOOMKillerSparesTheInit fills a long-lived sandbox's memory limit
// with many small processes, the case where the init (here the
// race-instrumented test binary, tens of MiB resident) was the largest
// process and so the OOM killer's first victim, which ended the whole
// sandbox. Commands now run with an OOM score CommandOOMScoreAdj above
// their init's: the kernel kills them, the init lives, and the sandbox
// runs the next command — also one started while the limit is being
// filled, which once killed the init 1 time in 15: the init raised its
// own score around each fork for the command to inherit, and an OOM kill
// during the fork took the init, then the largest process at that score.
func TestOOMKillerSparesTheInit(t *testing.T) {
	if !canLimit(t) {
		t.Skip("no writable cgroup for this user: no memory limit to fill")
	}
	ctx := context.Background()
	sb := provision(t, sandbox.Spec{Limits: sandbox.Limits{Memory: 48 << 20}})
	info := sb.Info()
	initScore := func() string {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", info.InitPID))
		if err != nil {
			t.Fatalf("the init's oom_score_adj: %v (is it alive?)", err)
		}
		return strings.TrimSpace(string(b))
	}
	base, err := strconv.Atoi(initScore())
	if err != nil {
		t.Fatal(err)
	}
	// A command cannot lower its score (Landlock: no writes to /proc).
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo 0 > /proc/self/oom_score_adj"}})
	if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Errorf("a command lowering its oom_score_adj: %+v, %v; want EACCES", res, err)
	}
	// Forty subshells, each holding a 2 MB string, under 48 MiB, and
	// commands started beside them: each fork then meets OOM kills.
	const fill = `for i in $(seq 40); do (x=$(head -c 2000000 /dev/zero | tr '\0' a); sleep 1) & done; wait`
	job, err := sb.Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", fill}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}})
		if err != nil {
			t.Fatalf("command %d during the OOM kills: %+v, %v", i, res, err)
		}
	}
	// OOMKilled: the cgroup's OOM kill count rose while it ran.
	if res, err := job.Wait(); err != nil || !res.OOMKilled {
		t.Fatalf("the memory-filling command: %+v, %v; want OOM kills (did it fill the limit?)", res, err)
	}
	res, err = sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"echo", "still here"}})
	if err != nil || string(res.Stdout) != "still here\n" {
		t.Errorf("a command after the OOM kills: %+v, %v", res, err)
	}
	if got := initScore(); got != strconv.Itoa(base) {
		t.Errorf("the init after the OOM kills: oom_score_adj %s, want %d", got, base)
	}
}

// TestDegradedMemoryLimitWithALargeEnvironment runs a command under a
// memory limit degraded to RLIMIT_AS (no cgroup for this user), which the
// rlimit trampoline applies before it execs the command. Applied below
// the address space the trampoline's Go runtime had already reserved, it
// left the heap unable to grow, and syscall.Exec, which builds the C
// arrays of argv and the environment when called, died of it ("fatal
// error: runtime: out of memory") whenever those arrays needed new heap:
// with a few thousand variables every time, in the VM now and then with
// none. The trampoline now builds them before the limits apply.
func TestDegradedMemoryLimitWithALargeEnvironment(t *testing.T) {
	if canLimit(t) {
		t.Skip("a cgroup enforces memory limits for this user: no RLIMIT_AS, no trampoline")
	}
	spec := sandbox.Spec{Limits: sandbox.Limits{Memory: 64 << 20}, BestEffort: true}
	for i := range 3000 {
		spec.Env = append(spec.Env, fmt.Sprintf("V%d=%s", i, strings.Repeat("x", 50)))
	}
	out, err := sandbox.Command(context.Background(), spec, "sh", "-c", `ulimit -v; env | grep -c '^V'`).Output()
	if err != nil || string(out) != "65536\n3000\n" {
		t.Fatalf("under RLIMIT_AS with 3000 variables: %q, %v", out, err)
	}
}
