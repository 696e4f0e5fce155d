package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// tentBin is the tent binary under test: $TENT_BINARY when set (the
// unprivileged run builds it once, tent-server beside it), else built by
// TestMain.
var tentBin string

// marker is set in tent's environment by every test run; the sandbox
// must not see it unless asked to.
const marker = "TENT_TEST_MARKER"

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if tentBin = os.Getenv("TENT_BINARY"); tentBin != "" {
		return sandboxtest.Run(m)
	}
	dir, err := os.MkdirTemp("", "tent-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// tent and, beside it, tent-server (its serve and mcp run it).
	tentBin = filepath.Join(dir, "tent")
	for _, prog := range []string{"tent", ServerBinary} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, prog), "./cmd/"+prog)
		build.Dir = repoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", prog, err, out)
			return 1
		}
	}
	return sandboxtest.Run(m)
}

// testdata returns the path of a file in testdata ($TENT_TESTDATA when
// the tests run outside the package directory).
func testdata(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("TENT_TESTDATA")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "testdata")
	}
	return filepath.Join(dir, name)
}

// result is how a tent process ended.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// invocation is one tent process to run.
type invocation struct {
	args []string
	env  []string // added to the base environment
	base []string // replaces baseEnv() when not nil
	dir  string   // working directory; "" is the test's
	bin  string   // the tent binary; "" is tentBin
	// stdin is tent's stdin (nil: /dev/null).
	stdin io.Reader
}

// baseEnv is tent's environment in the tests: a known TERM, LANG and TZ,
// and the marker.
func baseEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "USER=" + os.Getenv("USER"),
		"TERM=xterm-test", "LANG=C.UTF-8", "TZ=UTC", marker + "=leaked",
	}
}

// start starts tent; wait finishes it.
func (inv invocation) start(t *testing.T) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, time.Time) {
	t.Helper()
	bin := inv.bin
	if bin == "" {
		bin = tentBin
	}
	cmd := exec.Command(bin, inv.args...)
	base := inv.base
	if base == nil {
		base = baseEnv()
	}
	cmd.Env = append(base, inv.env...)
	cmd.Dir, cmd.Stdin = inv.dir, inv.stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stdout, &stderr, start
}

func wait(t *testing.T, cmd *exec.Cmd, stdout, stderr *bytes.Buffer, start time.Time) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("tent %q did not finish in 60s; stderr: %s", cmd.Args[1:], stderr)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func (inv invocation) run(t *testing.T) result {
	t.Helper()
	cmd, stdout, stderr, start := inv.start(t)
	return wait(t, cmd, stdout, stderr, start)
}

// tent runs tent with args in the base environment.
func tent(t *testing.T, args ...string) result {
	t.Helper()
	return invocation{args: args}.run(t)
}

// expect checks the exit code and that stderr holds every substring.
func (r result) expect(t *testing.T, code int, stderr ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q does not contain %q", r.stderr, s)
		}
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"run", "--", "/bin/true"}, 0, nil},
		{[]string{"run", "/bin/true"}, 0, nil},
		{[]string{"run", "--", "sh", "-c", "exit 3"}, 3, nil},
		{[]string{"run", "--", "sh", "-c", "kill -TERM $$"}, 143, nil},
		{[]string{"run", "--", "sh", "-c", "kill -KILL $$"}, 137, nil},
		{[]string{"run", "--", "/nonexistent"}, 127, []string{"tent: command not found", "/nonexistent"}},
		{[]string{"run", "--", "nonexistent-command"}, 127, []string{"tent: command not found", "nonexistent-command"}},
		{[]string{"run", "--", "/etc"}, 126, []string{"tent: command not executable"}},
		{[]string{"run", "--bogus", "--", "true"}, 125, []string{"tent: unknown flag: --bogus", "tent run --help"}},
		{[]string{"run"}, 125, []string{"tent: missing command", "tent run [flags] -- CMD [ARGS...]"}},
		{[]string{"run", "--"}, 125, []string{"tent: missing command"}},
		{[]string{"bogus"}, 125, []string{`tent: unknown command "bogus"`}},
		{[]string{"run", "--memory", "-1", "--", "true"}, 125, []string{`tent: --memory "-1": size is negative`}},
		{[]string{"run", "--memory", "1.5G", "--", "true"}, 125, []string{`tent: --memory "1.5G": fractional`}},
		{[]string{"run", "--memory", "100", "--", "true"}, 125, []string{"limits.memory", "below the 1 MiB minimum"}},
		{[]string{"run", "--pids", "x", "--", "true"}, 125, []string{`tent: --pids "x": want a whole number`}},
		{[]string{"run", "--cpus", "-1", "--", "true"}, 125, []string{`tent: --cpus "-1": want a number of cores`}},
		{[]string{"run", "--nofile", "-5", "--", "true"}, 125, []string{`tent: --nofile "-5"`}},
		{[]string{"run", "--timeout", "-1s", "--", "true"}, 125, []string{`tent: --timeout "-1s": duration is negative`}},
		{[]string{"run", "--timeout", "5", "--", "true"}, 125, []string{`tent: --timeout "5": not a duration`}},
		{[]string{"run", "--user", "root", "--", "true"}, 125, []string{`tent: --user "root": uid: not a number`}},
		{[]string{"run", "--net", "wifi", "--", "true"}, 125, []string{`tent: --net: unknown net mode "wifi"`}},
		{[]string{"run", "--hostname", "bad_name!", "--", "true"}, 125, []string{"hostname", "not a valid host name"}},
		{[]string{"run", "--workdir", "relative", "--", "true"}, 125, []string{"workdir", "absolute"}},
		{[]string{"run", "--sysctl", "net.ipv4.tcp_syncookies=0", "--", "sh", "-c", `test "$(cat /proc/sys/net/ipv4/tcp_syncookies)" = 0`}, 0, nil},
		{[]string{"run", "--sysctl", "net.ipv4.tcp_syncookies", "--", "true"}, 125, []string{`tent: --sysctl "net.ipv4.tcp_syncookies": want K=V`}},
		{[]string{"run", "--sysctl", "kernel.core_pattern=|/tmp/x", "--", "true"}, 125, []string{"sysctls: kernel.core_pattern is not a sysctl of the sandbox's own namespaces"}},
		{[]string{"run", "--net", "host", "--sysctl", "net.ipv4.ip_forward=1", "--", "true"}, 125, []string{"net.ipv4.ip_forward", "network mode host"}},
		{[]string{"run", "--env", "FOO", "--", "true"}, 125, []string{`tent: --env "FOO": not KEY=VALUE`, "--env-pass"}},
		{[]string{"run", "--env-pass", "A-B", "--", "true"}, 125, []string{`tent: --env-pass "A-B": not a variable name`}},
		{[]string{"run", "--env-file", "/nonexistent.env", "--", "true"}, 125, []string{"tent: --env-file", "/nonexistent.env"}},
		{[]string{"run", "--seccomp", "/nonexistent.json", "--", "true"}, 125, []string{"tent: --seccomp", "/nonexistent.json"}},
		{[]string{"run", "--policy", "/nonexistent.yaml", "--", "true"}, 125, []string{"tent: policy /nonexistent.yaml", "no such file"}},
		{[]string{"run", "--ro", "/does/not/exist", "--", "true"}, 125, []string{"tent: ", `"/does/not/exist"`, "no such file"}},
		{[]string{"run", "--ro", "/tmp:/proc", "--", "true"}, 125, []string{"tent: ", `"/proc" is reserved`}},
		{[]string{"run", "--ro", "/tmp:/dev/x", "--", "true"}, 125, []string{"tent: ", `"/dev/x" is reserved`}},
		{[]string{"run", "--ro", "/tmp:relative", "--", "true"}, 125, []string{"tent: ", "not absolute"}},
		{[]string{"run", "--ro", "/tmp:/a/../b", "--", "true"}, 125, []string{"tent: ", `contains ".."`}},
		{[]string{"run", "--ro", "/tmp:/x", "--rw", "/etc:/x", "--", "true"}, 125, []string{"tent: ", "already used"}},
		{[]string{"doctor", "extra"}, 125, []string{"tent: unknown command", "extra"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := tent(t, tc.args...)
			r.expect(t, tc.code, tc.stderr...)
			if tc.code < 125 && r.stderr != "" {
				t.Errorf("tent printed %q for a command's own exit", r.stderr)
			}
		})
	}
}

func TestTimeoutKillsAndExits124(t *testing.T) {
	t.Parallel()
	// No bound on the elapsed time (a slow machine may take seconds to
	// start the sandbox): the exit code and the message say that the
	// timeout, not sleep's end, ended the run.
	r := tent(t, "run", "--timeout", "300ms", "--", "sleep", "1000")
	r.expect(t, 124, "tent: timed out after 300ms: process tree killed")
}

func TestNotExecutableMount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tent(t, "run", "--ro", dir+":/x", "--", "/x/script")
	r.expect(t, 126, "tent: command not executable", "/x/script")
	// The same file through sh runs: the mount itself is readable.
	r = tent(t, "run", "--ro", dir+":/x", "--", "sh", "/x/script")
	r.expect(t, 0)
	if r.stdout != "ran\n" {
		t.Errorf("stdout %q, want ran", r.stdout)
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	r := tent(t, "run", "--help")
	r.expect(t, 0)
	for _, f := range []string{"--ro", "--rw", "--workdir", "--net", "--memory", "--pids", "--cpus", "--timeout", "--nofile",
		"--env ", "--env-pass", "--env-file", "--env-inherit", "--user", "--hostname", "--seccomp", "--policy",
		"--best-effort", "-v, --verbose", "--report"} {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("tent run --help does not mention %s:\n%s", f, r.stdout)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := tent(t, "version")
	r.expect(t, 0)
	if !strings.HasPrefix(r.stdout, "tent ") {
		t.Errorf("tent version printed %q", r.stdout)
	}
}

func TestVerboseLogsToStderr(t *testing.T) {
	t.Parallel()
	r := tent(t, "run", "-v", "--env-pass", "TENT_TEST_UNSET", "--", "true")
	r.expect(t, 0, "level=DEBUG", "TENT_TEST_UNSET", "not set", `msg="tent started"`, `msg="init phases"`, `"root built"=`, `"command started"=`, `msg="sandbox torn down"`)
	if q := tent(t, "run", "--env-pass", "TENT_TEST_UNSET", "--", "true"); q.stderr != "" {
		t.Errorf("without -v tent printed %q", q.stderr)
	}
}
