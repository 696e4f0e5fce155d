//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// reopenScript reopens every stdio stream by path, as `> /dev/stdout`,
// `cat /dev/stdin`, `tee /dev/stderr` and `curl -o /dev/stdout` do.
const reopenScript = `cat /dev/stdin > /dev/stdout && echo out-fd > /dev/fd/1 && echo out-proc > /proc/self/fd/1 && echo err > /dev/stderr && echo err-fd > /dev/fd/2`

func TestStdioCanBeReopened(t *testing.T) {
	// The caller's stdio as tent's own tests and pipelines give it: pipes
	// (a root caller's belong to root, mode 0600), a file owned by
	// another user, sockets. Each must be reopenable by path inside,
	// exactly as the command can use the descriptor itself.
	dir := t.TempDir()
	readAll := func(f *os.File) chan string {
		c := make(chan string, 1)
		go func() { b, _ := io.ReadAll(f); f.Close(); c <- string(b) }()
		return c
	}
	t.Run("pipes", func(t *testing.T) {
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		errR, errW, _ := os.Pipe()
		go func() { inW.WriteString("in\n"); inW.Close() }()
		out, errs := readAll(outR), readAll(errR)
		cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", reopenScript)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
		err := cmd.Run()
		// A root caller's pipes were lent to the sandbox's user: they
		// are given back once the command has ended.
		for _, f := range []*os.File{inR, outW, errW} {
			var st syscall.Stat_t
			if serr := syscall.Fstat(int(f.Fd()), &st); serr != nil || int(st.Uid) != os.Geteuid() {
				t.Errorf("a stdio pipe belongs to uid %d after the run, want %d (%v)", st.Uid, os.Geteuid(), serr)
			}
		}
		inR.Close()
		outW.Close()
		errW.Close()
		if err != nil {
			t.Fatalf("%v (stderr %q)", err, <-errs)
		}
		expectText(t, "stdout", <-out, "in\nout-fd\nout-proc\n")
		expectText(t, "stderr", <-errs, "err\nerr-fd\n")
	})
	t.Run("files of another user", func(t *testing.T) {
		in := filepath.Join(dir, "in")
		outPath := filepath.Join(dir, "out")
		if err := os.WriteFile(in, []byte("in\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		inF, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		defer inF.Close()
		outF, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer outF.Close()
		if privileged() {
			// Owned by neither root nor the sandbox's user.
			for _, p := range []string{in, outPath} {
				if err := os.Chown(p, 12345, 12345); err != nil {
					t.Fatal(err)
				}
			}
		}
		cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", reopenScript)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inF, outF, outF
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(outPath)
		expectText(t, "the output file", string(got), "in\nout-fd\nout-proc\nerr\nerr-fd\n")
	})
	t.Run("sockets", func(t *testing.T) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
		defer ours.Close()
		go func() { ours.Write([]byte("in\n")); syscall.Shutdown(fds[0], syscall.SHUT_WR) }()
		out := readAll(ours)
		cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", reopenScript)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs, theirs, theirs
		err = cmd.Run()
		theirs.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := <-out
		// stdout and stderr are two relays into one socket: compare sets.
		if !containsAll(got, "in\n", "out-fd\n", "out-proc\n", "err\n", "err-fd\n") || len(got) != len("in\nout-fd\nout-proc\nerr\nerr-fd\n") {
			t.Errorf("the socket got %q", got)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		var out bytes.Buffer
		cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", `echo hi > /dev/stdout; echo there > /dev/stderr; echo x > /dev/tty && echo tty`)
		cmd.TTY, cmd.Stdout = &sandbox.Terminal{}, &out
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		expectText(t, "the terminal", strings.ReplaceAll(out.String(), "\r", ""), "hi\nthere\nx\ntty\n")
	})
	t.Run("exec", func(t *testing.T) {
		sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Terminate(context.Background())
		outR, outW, _ := os.Pipe()
		out := readAll(outR)
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", reopenScript},
			Stdin: strings.NewReader("in\n"), Stdout: outW, Stderr: outW})
		outW.Close()
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		expectText(t, "the exec's output", <-out, "in\nout-fd\nout-proc\nerr\nerr-fd\n")
	})
}

func expectText(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func TestWorkdirErrorsAreTheirOwn(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		errno syscall.Errno
	}{{"/nonexistent-dir", syscall.ENOENT}, {"/etc/hostname", syscall.ENOTDIR}} {
		_, _, err := run(t, sandbox.Spec{Identity: sandbox.Identity{Workdir: tc.dir}}, "ls")
		if !errors.Is(err, sandbox.ErrWorkDir) || !errors.Is(err, sandbox.ErrInvalidSpec) || !errors.Is(err, tc.errno) || errors.Is(err, sandbox.ErrCommandNotFound) {
			t.Errorf("workdir %s: %v, want ErrWorkDir, ErrInvalidSpec and %v", tc.dir, err, tc.errno)
		}
		if code := sandbox.ExitCode(err); code != 125 {
			t.Errorf("workdir %s: exit code %d, want 125", tc.dir, code)
		}
		if !strings.Contains(err.Error(), tc.dir) {
			t.Errorf("workdir %s: %q does not name it", tc.dir, err)
		}
	}
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"ls"}, Dir: "/nonexistent-dir"})
	if !errors.Is(err, sandbox.ErrWorkDir) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("exec in a missing Dir: %v, want ErrWorkDir", err)
	}
}

func TestStartErrorsDoNotDependOnLimits(t *testing.T) {
	// With rlimits the command goes through tent's trampoline: a missing
	// or non-executable command must still be a start error, not an exit
	// 127 or 126.
	for _, limits := range []sandbox.Limits{{}, {NoFile: 64}} {
		spec := sandbox.Spec{Limits: limits}
		for _, tc := range []struct {
			cmd  string
			want error
		}{{"/nonexistent", sandbox.ErrCommandNotFound}, {"nonexistent-cmd", sandbox.ErrCommandNotFound}, {"/etc/hostname", sandbox.ErrNotExecutable}} {
			_, _, err := run(t, spec, tc.cmd)
			if !errors.Is(err, tc.want) {
				t.Errorf("limits %+v, %s: %v, want %v", limits, tc.cmd, err, tc.want)
			}
		}
		// A command that runs and exits 127 is not a missing command.
		_, _, err := run(t, spec, "sh", "-c", "exit 127")
		var ee *sandbox.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 127 {
			t.Errorf("limits %+v, exit 127: %v, want an ExitError with 127", limits, err)
		}
	}
}

func TestContextDeadlineIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cmd := sandbox.Command(ctx, sandbox.Spec{}, "sleep", "60")
	err := cmd.Run()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want context.DeadlineExceeded", err)
	}
	if cmd.Report != nil && cmd.Report.Signal != "" && cmd.Report.Signal != "killed" {
		t.Errorf("report signal %q, want killed", cmd.Report.Signal)
	}
}

func TestExitErrorKeepsStderr(t *testing.T) {
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", "echo out; echo oops >&2; exit 3")
	out, err := cmd.Output()
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Output: %v, want exit status 3", err)
	}
	expectText(t, "stdout", string(out), "out\n")
	expectText(t, "ExitError.Stderr", string(ee.Stderr), "oops\n")
}

func TestOOMKillOfADescendantIsReported(t *testing.T) {
	// The command survives; a child it started is killed by the memory
	// limit: the report says so (from the cgroup's OOM-kill counter).
	spec := withProbe(t, sandbox.Spec{Limits: sandbox.Limits{Memory: 64 << 20}, BestEffort: true})
	out, cmd, err := run(t, spec, "sh", "-c", probeTarget+"/testprobe alloc 256 >/dev/null 2>&1; echo survived")
	if p, _ := protectionOf(cmd.Report, "memory"); p.Status != sandbox.Enforced {
		t.Skipf("no cgroup memory limit here: %+v", p)
	}
	var ee *sandbox.ExitError
	switch {
	case err == nil && out == "survived": // the child alone (cgroup v1)
	case errors.As(err, &ee) && ee.Report != nil && ee.Report.OOMKilled:
		// cgroup v2: a one-shot command's cgroup has memory.oom.group set,
		// so the OOM killer takes the whole run, and says so.
	default:
		t.Fatalf("%q %v", out, err)
	}
	if !cmd.Report.OOMKilled {
		t.Error("Report.OOMKilled is false after a descendant was OOM-killed")
	}
	sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", probeTarget + "/testprobe alloc 256 >/dev/null 2>&1; echo survived"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !res.OOMKilled || res.Signal != "" {
		t.Errorf("exec: exit %d, signal %q, OOMKilled %v; want 0, none, true", res.ExitCode, res.Signal, res.OOMKilled)
	}
}

func TestLibraryErrorsNameGoFields(t *testing.T) {
	// The library speaks Go: Spec.BestEffort, not the CLI's flag.
	err := &sandbox.UnsupportedError{Missing: []sandbox.Missing{{Protection: "memory", Reason: "no cgroup", Fix: "x"}}, Degradable: true}
	if msg := err.Error(); !strings.Contains(msg, "Spec.BestEffort") || strings.Contains(msg, "--") {
		t.Errorf("UnsupportedError says %q", msg)
	}
	// Best effort is offered only where it would go on.
	err.Degradable = false
	if msg := err.Error(); strings.Contains(msg, "BestEffort") {
		t.Errorf("a refusal best effort cannot lift says %q", msg)
	}
}
