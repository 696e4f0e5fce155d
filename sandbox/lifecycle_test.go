package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func provision(t *testing.T, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Terminate(context.Background()) })
	return sb
}

func execOut(t *testing.T, sb *sandbox.Sandbox, req sandbox.ExecRequest) (string, *sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	req.Stdout = &out
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("%v: %v", req.Args, err)
	}
	return strings.TrimSpace(out.String()), res
}

func TestSandboxKeepsStateAcrossExecs(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo kept > /tmp/f; exit 3"}}); res.ExitCode != 3 || out != "" {
		t.Fatalf("first exec: %+v %q", res, out)
	}
	out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /tmp/f; echo $FOO; pwd"}, Env: []string{"FOO=bar"}, Dir: "/tmp"})
	if res.ExitCode != 0 || out != "kept\nbar\n/tmp" {
		t.Fatalf("second exec: %+v %q", res, out)
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"/nonexistent"}}); !errors.Is(err, sandbox.ErrCommandNotFound) {
		t.Errorf("missing command: %v", err)
	}
}

func TestSandboxConcurrentExecs(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var out bytes.Buffer
			res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%5)}, Stdout: &out})
			switch {
			case err != nil:
				errs <- err
			case res.ExitCode != i%5 || strings.TrimSpace(out.String()) != fmt.Sprint(i):
				errs <- fmt.Errorf("exec %d: %+v %q", i, res, out.String())
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSandboxExecTimeoutKillsOnlyThatExec(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	long := make(chan *sandbox.ExecResult)
	go func() {
		res, _ := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "sleep 2; echo survived"}})
		long <- res
	}()
	start := time.Now()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "sleep 30 & sleep 30"}, Timeout: 200 * time.Millisecond})
	if err != nil || !res.TimedOut || res.ExitCode != 124 || time.Since(start) > 3*time.Second {
		t.Fatalf("timed-out exec: %+v, %v after %s", res, err, time.Since(start))
	}
	if r := <-long; r == nil || r.ExitCode != 0 {
		t.Errorf("the other exec was affected: %+v", r)
	}
	// A cancelled context kills the exec too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sleep", "30"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled exec: %v", err)
	}
}

func TestSandboxStreamsOutput(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	pr, pw := ioPipe()
	done := make(chan error)
	go func() {
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo first; sleep 1; echo second"}, Stdout: pw})
		pw.Close()
		done <- err
	}()
	buf := make([]byte, 6)
	start := time.Now()
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "first\n" || time.Since(start) > 900*time.Millisecond {
		t.Errorf("first line %q after %s: not streamed", buf, time.Since(start))
	}
	if rest, _ := io.ReadAll(pr); string(rest) != "second\n" {
		t.Errorf("rest %q", rest)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSandboxTerminateLeavesNothing(t *testing.T) {
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "setsid sleep 317 & sleep 317"}})
	}()
	time.Sleep(300 * time.Millisecond)
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNoProcess(t, "sleep", "317")
	for _, c := range sb.CgroupPaths() {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after terminate (%v)", c, err)
		}
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Errorf("exec after terminate: %v, want ErrTerminated", err)
	}
	if err := sb.Terminate(context.Background()); err != nil {
		t.Errorf("second terminate: %v", err)
	}
}

func TestSandboxSuspendAndResume(t *testing.T) {
	dir := rwDir(t)
	os.Chmod(dir, 0o777)
	sb := provision(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}})
	if !canLimit(t) {
		if err := sb.Suspend(context.Background()); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("suspend without a cgroup: %v, want ErrUnsupported", err)
		}
		return
	}
	// A counter that ticks every 10 ms in the background, read from the host.
	go func() {
		_, _ = sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /out/n.tmp; mv /out/n.tmp /out/n; sleep 0.01; done"}})
	}()
	count := func() string { b, _ := os.ReadFile(filepath.Join(dir, "n")); return strings.TrimSpace(string(b)) }
	time.Sleep(300 * time.Millisecond)
	if err := sb.Suspend(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrSuspended) || !strings.Contains(err.Error(), "resume") {
		t.Fatalf("exec while suspended: %v, want ErrSuspended naming the state", err)
	}
	frozen := count()
	time.Sleep(300 * time.Millisecond)
	if later := count(); later != frozen || frozen == "" {
		t.Errorf("counter moved while suspended: %q -> %q", frozen, later)
	}
	if err := sb.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if after := count(); after == frozen {
		t.Errorf("counter stuck after resume at %s", after)
	}
	// Terminating a suspended sandbox works too.
	if err := sb.Suspend(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sb.Terminate(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("terminating a suspended sandbox hangs")
	}
}
