package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// Sandbox.Command reads as os/exec: Output, a non-zero exit as an
// *ExitError, the spec's env and workdir for the command alone, and the
// sandbox still running after each command.
func TestSandboxCommandIsOsExecShaped(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Env: []string{"BASE=b"}}}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)

	out, err := sb.Command(ctx, "sh", "-c", "echo $BASE; echo oops >&2; exit 3").Output()
	var ee *sandbox.ExitError
	if string(out) != "b\n" || !errors.As(err, &ee) || ee.ExitCode() != 3 || string(ee.Stderr) != "oops\n" {
		t.Fatalf("Output: %q, %v; want b, exit 3 with its stderr", out, err)
	}
	c := sb.Command(ctx, "sh", "-c", "echo $EXTRA $(pwd) > /tmp/seen")
	c.Spec.Env, c.Spec.Workdir = []string{"EXTRA=x"}, "/tmp"
	if err := c.Run(); err != nil || c.Report.ExitCode != 0 {
		t.Fatalf("Run: %v", err)
	}
	if out, err := sb.Command(ctx, "cat", "/tmp/seen").Output(); err != nil || string(out) != "x /tmp\n" {
		t.Fatalf("the command's env and workdir: %q, %v", out, err)
	}
	if out, err := sb.Command(ctx, "sh", "-c", "echo ${EXTRA:-unset}").Output(); err != nil || string(out) != "unset\n" {
		t.Errorf("a later command saw another's env: %q, %v", out, err)
	}
	if err := sb.Command(ctx, "no-such-program").Run(); !errors.Is(err, sandbox.ErrCommandNotFound) {
		t.Errorf("a missing program: %v, want ErrCommandNotFound", err)
	}
	if st := sb.Info().State; st != sandbox.StateRunning {
		t.Errorf("the sandbox is %s after its commands, want running", st)
	}
}

// ctx's end kills the command (default) or calls Cancel; a command that
// ignores Cancel is killed WaitDelay later. The sandbox goes on.
func TestSandboxCommandCancelAndWaitDelay(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)

	cctx, cancel := context.WithCancel(ctx)
	c := sb.Command(cctx, "sleep", "300")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	cancel()
	err = c.Wait()
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || c.Report.ExitCode != 137 || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("default cancel: %v (%+v), want killed by the context", err, c.Report)
	}

	cctx, cancel = context.WithCancel(ctx)
	defer cancel()
	var called atomic.Bool
	c = sb.Command(cctx, "sh", "-c", "trap 'echo got TERM' TERM; echo ready; while :; do sleep 1; done")
	pr, pw := io.Pipe()
	defer pr.Close()
	c.Stdout = pw
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, pr)
	}()
	c.Cancel = func() error { called.Store(true); return c.Signal(syscall.SIGTERM) }
	c.WaitDelay = 200 * time.Millisecond
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if line := <-ready; line != "ready\n" {
		t.Fatalf("first line %q", line)
	}
	cancel()
	err = c.Wait()
	if !called.Load() || !errors.As(err, &ee) || c.Report.Signal != "killed" {
		t.Fatalf("Cancel then WaitDelay: called %v, %v (%+v); want SIGTERM ignored, then killed", called.Load(), err, c.Report)
	}
	if out, err := sb.Command(ctx, "echo", "alive").Output(); err != nil || string(out) != "alive\n" {
		t.Errorf("the sandbox after a cancelled command: %q, %v", out, err)
	}
}

// A started command's input ends with CloseStdin, and its terminal takes
// the size Resize gives; a command without either fails plainly.
func TestProcessCloseStdinAndResize(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)

	pr, pw := io.Pipe() // never closed by the test: only CloseStdin ends the input
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, "line one\n") }()
	outR, outW := io.Pipe()
	p, err := sb.Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "read l; echo got $l; cat; echo eof"}, Stdin: pr, Stdout: outW})
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(outR)
	if l, err := lines.ReadString('\n'); err != nil || l != "got line one\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if l, err := lines.ReadString('\n'); err != nil || l != "eof\n" {
		t.Fatalf("after CloseStdin: %q, %v; want eof (cat saw the end of its input)", l, err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if err := p.Resize(sandbox.WindowSize{Rows: 10, Cols: 20}); err == nil {
		t.Error("Resize of a command without a terminal succeeded")
	}

	resize := make(chan sandbox.WindowSize)
	tin, tinW := io.Pipe()
	defer tinW.Close()
	var tout strings.Builder
	p, err = sb.Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "read _; stty size"}, Stdin: tin, Stdout: &syncWriter{w: &tout},
		TTY: &sandbox.Terminal{Size: sandbox.WindowSize{Rows: 24, Cols: 80}, Resize: resize}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(sandbox.WindowSize{Rows: 33, Cols: 111}); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err == nil {
		t.Error("CloseStdin of a terminal succeeded")
	}
	_, _ = io.WriteString(tinW, "go\n")
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := tout.String(); !strings.Contains(got, "33 111") {
		t.Errorf("stty size after Resize: %q, want 33 111", got)
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
