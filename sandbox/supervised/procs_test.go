package supervised

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// A detached command is the supervisor's: its pid comes back at once, it
// is listed, its output waits for a reader, who gets it once, and its
// exit is kept; a signal reaches a running one.
func TestDetachedCommands(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	pid, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo one; echo two >&2; exit 7"}}, "")
	if err != nil || pid <= 1 {
		t.Fatalf("ExecDetached: pid %d, %v", pid, err)
	}
	var out bytes.Buffer
	res, err := attach(ctx, sbOf(t, b, info.ID), pid, &out, nil)
	// One writer takes both streams: each line whole, in either order
	// (two streams have no order between them, as two pipes have none).
	if got := out.String(); err != nil || res.ExitCode != 7 || got != "one\ntwo\n" && got != "two\none\n" {
		t.Fatalf("Attach: %+v, %v, output %q; want exit 7 and both streams", res, err, got)
	}
	out.Reset()
	if res, err := attach(ctx, sbOf(t, b, info.ID), pid, &out, nil); err != nil || res.ExitCode != 7 || out.Len() != 0 {
		t.Errorf("a second Attach: %+v, %v, output %q; want the exit and no output again", res, err, out.String())
	}

	sleeper, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sleep", "60"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := sbOf(t, b, info.ID).Processes(ctx)
	if err != nil || len(procs) != 2 || procs[0].Pid != pid || procs[0].Running || procs[0].Exit != 7 || procs[1].Pid != sleeper || !procs[1].Running {
		t.Fatalf("Processes: %+v, %v", procs, err)
	}
	// The pid is the one inside: the sandbox's own ps sees it.
	if got, _ := execOut(t, b, info.ID, "sh", "-c", "cat /proc/"+itoa(sleeper)+"/cmdline | tr '\\0' ' '"); strings.TrimSpace(got) != "sleep 60" {
		t.Errorf("/proc/%d inside: %q, want the sleeper", sleeper, got)
	}
	if err := signalPid(ctx, sbOf(t, b, info.ID), sleeper, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, "the signalled command to be reported ended", func() bool {
		procs, _ := sbOf(t, b, info.ID).Processes(ctx)
		return len(procs) == 2 && !procs[1].Running && procs[1].Signal == "terminated" && procs[1].Exit == 143
	})
	for _, err := range []error{
		signalPid(ctx, sbOf(t, b, info.ID), sleeper, syscall.SIGTERM),
		signalPid(ctx, sbOf(t, b, info.ID), 99999, syscall.SIGTERM),
		func() error { _, err := attach(ctx, sbOf(t, b, info.ID), 99999, &out, nil); return err }(),
	} {
		if !errors.Is(err, ErrNoProcess) {
			t.Errorf("a finished or unknown pid: %v, want ErrNoProcess", err)
		}
	}
	if _, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"true"}, Stdin: strings.NewReader("x")}, ""); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a detached command with stdin: %v, want ErrInvalidSpec", err)
	}
}

// A detached command as root (ExecRequest.AsRoot) is root inside.
func TestDetachedAsRoot(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	info := provision(t, b, sandbox.Spec{Identity: sandbox.Identity{User: &sandbox.User{UID: 1000, GID: 1000}}})
	pid, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"id", "-u"}, AsRoot: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if res, err := attach(ctx, sbOf(t, b, info.ID), pid, &out, nil); err != nil || res.ExitCode != 0 || out.String() != "0\n" {
		t.Errorf("a detached command as root: %+v, %v, output %q; want uid 0", res, err, out.String())
	}
}

// An attach that goes away leaves the command running; the next one gets
// what the first did not read; output beyond the bound is dropped and
// counted, never blocking the command.
func TestDetachedOutlivesItsReaders(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	pid, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo early; until [ -e /tmp/go ]; do sleep 0.05; done; echo late"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, "the early output", func() bool {
		procs, _ := sbOf(t, b, info.ID).Processes(ctx)
		return len(procs) == 1 && procs[0].Unread == int64(len("early\n"))
	})
	// The first reader leaves once it has the early line (not after a
	// fixed time, which a loaded machine may spend dialling).
	actx, cancel := context.WithCancel(ctx)
	first := &cancelWriter{want: "early\n", cancel: cancel}
	_, err = attach(actx, sbOf(t, b, info.ID), pid, first, nil)
	cancel()
	if !errors.Is(err, context.Canceled) || first.buf.String() != "early\n" {
		t.Fatalf("a reader that leaves: %v, %q", err, first.buf.String())
	}
	execOut(t, b, info.ID, "touch", "/tmp/go")
	var second bytes.Buffer
	res, err := attach(ctx, sbOf(t, b, info.ID), pid, &second, nil)
	if err != nil || res.ExitCode != 0 || second.String() != "late\n" {
		t.Errorf("the next reader: %+v, %v, %q; want only what the first did not read", res, err, second.String())
	}

	big, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, "the chatty command to end", func() bool {
		procs, _ := sbOf(t, b, info.ID).Processes(ctx)
		return len(procs) == 2 && !procs[1].Running
	})
	procs, _ := sbOf(t, b, info.ID).Processes(ctx)
	if p := procs[1]; p.Pid != big || p.Unread != MaxDetachedOutput || p.Dropped != 3000005-MaxDetachedOutput {
		t.Errorf("after 3 MB: unread %d, dropped %d; want %d kept", p.Unread, p.Dropped, MaxDetachedOutput)
	}
	var tail bytes.Buffer
	if _, err := attach(ctx, sbOf(t, b, info.ID), big, &tail, nil); err != nil || tail.Len() != MaxDetachedOutput || !strings.HasSuffix(tail.String(), "x\nend\n") {
		t.Errorf("attach after the bound: %d bytes, %v", tail.Len(), err)
	}
}

// At most MaxDetached commands run detached in one sandbox.
func TestDetachedIsBounded(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	for i := range MaxDetached {
		if _, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sleep", "60"}}, ""); err != nil {
			t.Fatalf("command %d: %v", i+1, err)
		}
	}
	if _, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sleep", "60"}}, ""); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "tent kill") {
		t.Errorf("command %d: %v, want a refusal", MaxDetached+1, err)
	}
	procs, _ := sbOf(t, b, info.ID).Processes(ctx)
	if err := signalPid(ctx, sbOf(t, b, info.ID), procs[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, "a finished record to make room", func() bool {
		_, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"true"}}, "")
		return err == nil
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// detach starts req as a process of the sandbox (tent exec -d) and
// returns its pid.
func detach(ctx context.Context, s *Sandbox, req sandbox.ExecRequest, tag string) (int, error) {
	p, err := s.Start(ctx, req, sandbox.StartOptions{Tag: tag})
	if err != nil {
		return 0, err
	}
	return p.Pid(), nil
}

// signalPid signals the process pid (tent kill).
func signalPid(ctx context.Context, s *Sandbox, pid int, sig syscall.Signal) error {
	p, err := s.Process(ctx, pid)
	if err != nil {
		return err
	}
	return p.Signal(ctx, sig)
}

// attach follows the process pid as tent attach does: its stdout and
// stderr from where the last follower left (both to stdout when stderr
// is nil, a line at a time in either order), then its result.
func attach(ctx context.Context, s *Sandbox, pid int, stdout, stderr io.Writer) (*sandbox.ExecResult, error) {
	p, err := s.Process(ctx, pid)
	if err != nil {
		return nil, err
	}
	procs, err := s.Processes(ctx)
	if err != nil {
		return nil, err
	}
	var taken [2]int64
	for _, pi := range procs {
		if pi.Pid == pid {
			taken = pi.Taken
		}
	}
	outs := [2]io.Writer{stdout, stderr}
	if stderr == nil {
		one := &lockedWriter{w: stdout}
		outs = [2]io.Writer{one, one}
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			off := taken[i]
			for {
				end, err := p.Follow(ctx, i+1, off, outs[i])
				if !errors.Is(err, sandbox.ErrOutputDropped) {
					errs[i] = err
					return
				}
				off = end
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// lockedWriter is one writer for two streams.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// cancelWriter is a bytes.Buffer that calls cancel once it holds want.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.buf.String() == w.want {
		w.cancel()
	}
	return n, err
}

// signalWriter is a slow bytes.Buffer (2 ms a write) that closes first
// at its first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.buf.Len() == 0 {
		close(w.first)
	}
	w.buf.Write(p)
	w.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	return len(p), nil
}

// A detached command's stdout and stderr reach their own writers, its tag
// and directory are listed (a running command's tag is its own), and an
// attached reader gets every byte: the command waits for it rather than
// losing output beyond the bound.
func TestDetachedStreamsTagsAndBackPressure(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	pid, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo one; echo two >&2; sleep 60"}, Dir: "/tmp"}, "web")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"true"}}, "web"); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a second running command tagged web: %v, want ErrInvalidSpec", err)
	}
	procs, err := sbOf(t, b, info.ID).Processes(ctx)
	if err != nil || len(procs) != 1 || procs[0].Tag != "web" || procs[0].Dir != "/tmp" || procs[0].Pid != pid {
		t.Fatalf("Processes: %+v, %v", procs, err)
	}
	sandboxtest.Eventually(t, "both lines", func() bool {
		procs, _ := sbOf(t, b, info.ID).Processes(ctx)
		return len(procs) == 1 && procs[0].Unread == 8
	})
	if err := signalPid(ctx, sbOf(t, b, info.ID), pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	res, err := attach(ctx, sbOf(t, b, info.ID), pid, &stdout, &stderr)
	if err != nil || res.Signal != "killed" || stdout.String() != "one\n" || stderr.String() != "two\n" {
		t.Fatalf("Attach with two writers: %+v, %v, stdout %q, stderr %q", res, err, stdout.String(), stderr.String())
	}

	big, err := detach(ctx, sbOf(t, b, info.ID), sandbox.ExecRequest{Args: []string{"sh", "-c", "echo ready; until [ -e /tmp/go ]; do sleep 0.05; done; head -c 3000000 /dev/zero | tr '\\0' x; echo end"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	w := &signalWriter{first: make(chan struct{})}
	attached := make(chan error, 1)
	go func() {
		_, err := attach(ctx, sbOf(t, b, info.ID), big, w, nil)
		attached <- err
	}()
	<-w.first
	execOut(t, b, info.ID, "touch", "/tmp/go")
	if err := <-attached; err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	got := w.buf.Len()
	w.mu.Unlock()
	if want := len("ready\n") + 3000000 + len("end\n"); got != want {
		t.Errorf("an attached reader got %d bytes, want all %d", got, want)
	}
	procs, _ = sbOf(t, b, info.ID).Processes(ctx)
	if p := procs[len(procs)-1]; p.Pid != big || p.Dropped != 0 || p.Unread != 0 {
		t.Errorf("after an attached read: %+v, want nothing dropped or left", p)
	}
}
