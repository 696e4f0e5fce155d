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
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "sleep 300 & sleep 300"}, Timeout: 200 * time.Millisecond})
	// Killed by the timeout, not ended by the sleeps: well within their
	// 300 s on any machine.
	if err != nil || !res.TimedOut || res.ExitCode != 124 || time.Since(start) > 100*time.Second {
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
	inR, inW := ioPipe()
	done := make(chan error)
	go func() {
		// The second line waits for input that is only sent once the
		// first line was read: without streaming, no first line comes.
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo first; read x; echo second"}, Stdin: inR, Stdout: pw})
		pw.Close()
		done <- err
	}()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != "first\n" {
		t.Errorf("first line %q, %v: not streamed", buf, err)
	}
	if _, err := io.WriteString(inW, "go\n"); err != nil {
		t.Fatal(err)
	}
	inW.Close()
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
	for _, c := range sb.Info().CgroupPaths {
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
	sb := provision(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}})
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

func TestSandboxExecCapturesAndCapsOutput(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	exec := func(req sandbox.ExecRequest) *sandbox.ExecResult {
		t.Helper()
		res, err := sb.Exec(context.Background(), req)
		if err != nil {
			t.Fatalf("%v: %v", req.Args, err)
		}
		return res
	}
	sh := func(script string) []string { return []string{"sh", "-c", script} }

	// nil writers: captured, each stream on its own.
	res := exec(sandbox.ExecRequest{Args: sh("echo out; echo err >&2; exit 2")})
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 2 || res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("captured: %+v", res)
	}
	// The default cap: exactly DefaultMaxOutput is kept whole, one byte
	// more is truncated.
	for _, n := range []int{sandbox.DefaultMaxOutput, sandbox.DefaultMaxOutput + 1} {
		res = exec(sandbox.ExecRequest{Args: sh(fmt.Sprintf("head -c %d /dev/zero", n))})
		if len(res.Stdout) != sandbox.DefaultMaxOutput || res.StdoutTruncated != (n > sandbox.DefaultMaxOutput) {
			t.Errorf("%d bytes under the default cap: kept %d, truncated %v", n, len(res.Stdout), res.StdoutTruncated)
		}
	}
	// Past the cap the command is never blocked: it writes 64 MiB into a
	// 10-byte cap and goes on to report on stderr. (A blocked command
	// would never end: the Timeout, far beyond any machine's time for
	// 64 MiB, turns that into a failure rather than a hang; no figure of
	// this machine's speed is asserted.)
	res = exec(sandbox.ExecRequest{Args: sh("head -c 67108864 /dev/zero | tr '\\0' a; echo went on >&2"), MaxOutput: 10, Timeout: 10 * time.Minute})
	if string(res.Stdout) != "aaaaaaaaaa" || !res.StdoutTruncated || string(res.Stderr) != "went on\n" || res.StderrTruncated || res.ExitCode != 0 {
		t.Errorf("64 MiB under a 10-byte cap: %+v", res)
	}
	// io.Discard is /dev/null inside, with nothing copied.
	res = exec(sandbox.ExecRequest{Args: sh("exec 3>&1; readlink /proc/self/fd/3 >&2"), Stdout: io.Discard})
	if res.Stdout != nil || string(res.Stderr) != "/dev/null\n" {
		t.Errorf("io.Discard: %+v", res)
	}
	// The caller's writer: streamed, uncapped unless MaxOutput says so.
	var buf bytes.Buffer
	res = exec(sandbox.ExecRequest{Args: sh("head -c 2097152 /dev/zero"), Stdout: &buf})
	if buf.Len() != 2<<20 || res.Stdout != nil || res.StdoutTruncated {
		t.Errorf("2 MiB to a writer: got %d bytes, %+v", buf.Len(), res)
	}
	buf.Reset()
	res = exec(sandbox.ExecRequest{Args: sh("echo hello world"), Stdout: &buf, MaxOutput: 5})
	if buf.String() != "hello" || !res.StdoutTruncated || res.Stdout != nil {
		t.Errorf("writer capped at 5: %q, %+v", buf.String(), res)
	}
	// One writer for both streams: one pipe, the order kept, one cap.
	buf.Reset()
	res = exec(sandbox.ExecRequest{Args: sh("echo 1; echo 2 >&2; echo 3; echo 4 >&2"), Stdout: &buf, Stderr: &buf})
	if buf.String() != "1\n2\n3\n4\n" || res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("combined: %q, %+v", buf.String(), res)
	}
	buf.Reset()
	res = exec(sandbox.ExecRequest{Args: sh("echo 1; echo 2 >&2; echo 3"), Stdout: &buf, Stderr: &buf, MaxOutput: 3})
	if buf.String() != "1\n2" || !res.StdoutTruncated || !res.StderrTruncated {
		t.Errorf("combined, capped at 3: %q, %+v", buf.String(), res)
	}
	// A file is capped through a pipe when MaxOutput is set.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res = exec(sandbox.ExecRequest{Args: sh("echo 123456789"), Stdout: f, MaxOutput: 4})
	if b, _ := os.ReadFile(f.Name()); string(b) != "1234" || !res.StdoutTruncated {
		t.Errorf("file capped at 4: %q, %+v", b, res)
	}
	// A failing writer is dropped; the command still runs to its end.
	res = exec(sandbox.ExecRequest{Args: sh("head -c 1048576 /dev/zero; echo end >&2"), Stdout: failingWriter{}})
	if res.ExitCode != 0 || string(res.Stderr) != "end\n" {
		t.Errorf("failing writer: %+v", res)
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"true"}, MaxOutput: -1}); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "MaxOutput -1 is negative") {
		t.Errorf("negative MaxOutput: %v, want ErrInvalidSpec naming MaxOutput", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSandboxExecReportsOOMKill(t *testing.T) {
	if !canLimit(t) {
		t.Skip("no writable cgroup for this user: OOM kills are neither enforced nor counted")
	}
	// The init is charged to the sandbox's cgroup too; the OOM killer
	// spares it for its commands (TestOOMKillerSparesTheInit).
	sb := provision(t, withProbe(t, sandbox.Spec{Limits: sandbox.Limits{Memory: 128 << 20}}))
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{probeTarget + "/testprobe", "alloc", "400"}})
	if err != nil || !res.OOMKilled || res.ExitCode != 137 || res.Signal != "killed" {
		t.Fatalf("allocating 400 MiB under 128 MiB: %+v, %v", res, err)
	}
	// A SIGKILL without an OOM kill is not one; the sandbox lives on.
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "kill -KILL $$"}})
	if err != nil || res.OOMKilled || res.ExitCode != 137 {
		t.Errorf("kill -KILL: %+v, %v", res, err)
	}
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{probeTarget + "/testprobe", "alloc", "4"}})
	if err != nil || res.OOMKilled || res.ExitCode != 0 || string(res.Stdout) != "ok 4\n" {
		t.Errorf("a small allocation after the OOM kill: %+v, %v", res, err)
	}
}
