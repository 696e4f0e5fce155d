package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// The process cases: a command started with Handle.Start is the
// sandbox's, found again by its real pid from another Handle, written to
// and read from there, signalled, waited for and listed; an unknown pid is
// ErrNoProcess; its output ring keeps the last MiB of each stream and says
// how much it dropped.

// maxRing is the documented bound of a process's output ring per stream.
const maxRing = 1 << 20

// readUntil reads stream fd of p from offset 0 until what it read
// contains want (or the stream ends), and returns all of it.
func readUntil(t *testing.T, p sandbox.Process, fd int, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got bytes.Buffer
	for off := int64(0); !strings.Contains(got.String(), want); {
		o, err := p.ReadOutput(ctx, fd, off)
		if err != nil {
			t.Fatalf("ReadOutput(%d, %d) after %q: %v", fd, off, got.String(), err)
		}
		if o.Dropped != 0 || o.Offset != off {
			t.Fatalf("ReadOutput(%d, %d): dropped %d, offset %d: want nothing dropped", fd, off, o.Dropped, o.Offset)
		}
		got.Write(o.Data)
		off += int64(len(o.Data))
		if o.End {
			break
		}
	}
	return got.String()
}

// find returns pid's entry in h's Processes.
func find(t *testing.T, h sandbox.Handle, pid int) sandbox.ProcessInfo {
	t.Helper()
	procs, err := h.Processes(context.Background())
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	for _, pi := range procs {
		if pi.Pid == pid {
			return pi
		}
	}
	t.Fatalf("Processes: no %d in %+v", pid, procs)
	return sandbox.ProcessInfo{}
}

// A command started with stdin through one Handle is found by its pid,
// a real one inside the sandbox, from a second Handle, which writes its
// stdin and reads the echo from its output at offset 0; it is listed
// while it runs and once it has exited, with its status; then its stdin
// and signals are ErrNoProcess, as an unknown pid is.
func processes(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	first := on(t, b, s.ID)
	p, err := first.Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "read l; echo got $l; cat >/dev/null; echo bye >&2; exit 3"}},
		sandbox.StartOptions{Stdin: true, Tag: "echo"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if p.Pid() <= 1 {
		t.Fatalf("Start: pid %d", p.Pid())
	}
	second := on(t, b, s.ID)
	again, err := second.Process(ctx, p.Pid())
	if err != nil || again.Pid() != p.Pid() {
		t.Fatalf("Process(%d) from a second handle: %v, %v", p.Pid(), again, err)
	}
	if got := out(t, b, s.ID, "cat", fmt.Sprintf("/proc/%d/cmdline", p.Pid())); !strings.HasPrefix(got, "sh\x00-c\x00read l") {
		t.Errorf("/proc/%d/cmdline inside: %q, want the started command's (its pid is the real one)", p.Pid(), got)
	}
	if pi := find(t, second, p.Pid()); !pi.Running || !pi.Stdin || pi.Tag != "echo" || pi.Args[0] != "sh" {
		t.Errorf("listed while running: %+v", pi)
	}
	if err := again.WriteStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatalf("WriteStdin from a second handle: %v", err)
	}
	if got := readUntil(t, again, 1, "got hello\n"); got != "got hello\n" {
		t.Errorf("stdout: %q, want the echo of what the second handle wrote", got)
	}
	// A ctx that has ended asks for what is there now, without a wait.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if o, err := again.ReadOutput(ended, 1, 0); err != nil || string(o.Data) != "got hello\n" || o.End {
		t.Errorf("ReadOutput with an ended ctx: %+v, %v; want what is there now", o, err)
	}
	if o, err := again.ReadOutput(ended, 1, int64(len("got hello\n"))); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadOutput with an ended ctx past what is there: %+v, %v; want context.Canceled at once", o, err)
	}
	if err := again.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("Wait: %+v, %v; want exit 3", res, err)
	}
	if got := readUntil(t, p, 2, "bye\n"); got != "bye\n" {
		t.Errorf("stderr: %q", got)
	}
	if o, err := p.ReadOutput(ctx, 1, 0); err != nil || string(o.Data) != "got hello\n" || !o.End {
		t.Errorf("stdout once ended: %+v, %v; want all of it and its end", o, err)
	}
	if pi := find(t, first, p.Pid()); pi.Running || pi.Exit != 3 || pi.Ended == nil {
		t.Errorf("listed once exited: %+v", pi)
	}
	if err := again.WriteStdin(ctx, []byte("late\n")); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("WriteStdin once exited: %v, want ErrNoProcess", err)
	}
	if err := again.Signal(ctx, syscall.SIGTERM); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("Signal once exited: %v, want ErrNoProcess", err)
	}
	if _, err := second.Process(ctx, 999999); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("Process(999999): %v, want ErrNoProcess", err)
	}
	if _, err := first.Start(ctx, sandbox.ExecRequest{Args: []string{"true"}, Stdout: &bytes.Buffer{}}, sandbox.StartOptions{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Start with the caller's stdout: %v, want ErrInvalidSpec", err)
	}
}

// A signal sent from a second Handle ends a started command, and its
// status says so; a command on a terminal gets the size asked for and
// Resize's.
func processSignalTTY(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	p, err := on(t, b, s.ID).Start(ctx, sandbox.ExecRequest{Args: []string{"sleep", "60"}}, sandbox.StartOptions{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	again, err := on(t, b, s.ID).Process(ctx, p.Pid())
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if err := again.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if res, err := again.Wait(ctx); err != nil || res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Errorf("Wait after SIGTERM: %+v, %v", res, err)
	}

	tp, err := on(t, b, s.ID).Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "stty size; read l; stty size"},
		TTY: &sandbox.Terminal{Size: sandbox.WindowSize{Rows: 30, Cols: 100}}}, sandbox.StartOptions{Stdin: true})
	if err != nil {
		t.Fatalf("Start on a terminal: %v", err)
	}
	readUntil(t, tp, 1, "30 100")
	if err := tp.Resize(ctx, sandbox.WindowSize{Rows: 40, Cols: 120}); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if err := tp.WriteStdin(ctx, []byte("\n")); err != nil {
		t.Fatalf("WriteStdin: %v", err)
	}
	readUntil(t, tp, 1, "40 120")
	if res, err := tp.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Errorf("Wait on a terminal: %+v, %v", res, err)
	}
	if pi := find(t, on(t, b, s.ID), tp.Pid()); !pi.TTY {
		t.Errorf("listed: %+v, want TTY", pi)
	}
}

// With nobody reading, a command's output ring keeps the last MiB of a
// stream and drops the oldest: a read from offset 0 says how much.
func processRing(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	const total = 3 * maxRing
	p, err := on(t, b, s.ID).Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero", total)}}, sandbox.StartOptions{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	if pi := find(t, on(t, b, s.ID), p.Pid()); pi.Dropped != total-maxRing || pi.Unread != maxRing {
		t.Errorf("listed: unread %d, dropped %d; want %d, %d", pi.Unread, pi.Dropped, maxRing, total-maxRing)
	}
	o, err := p.ReadOutput(ctx, 1, 0)
	if err != nil || o.Dropped != total-maxRing || o.Offset != total-maxRing || len(o.Data) == 0 {
		t.Fatalf("ReadOutput(1, 0): offset %d, dropped %d, %d bytes, %v; want the oldest %d dropped", o.Offset, o.Dropped, len(o.Data), err, total-maxRing)
	}
	kept := int64(0)
	for off := o.Offset; ; {
		o, err := p.ReadOutput(ctx, 1, off)
		if err != nil || o.Offset != off || o.Dropped != 0 {
			t.Fatalf("ReadOutput(1, %d): %d, %d, %v", off, o.Offset, o.Dropped, err)
		}
		kept += int64(len(o.Data))
		off += int64(len(o.Data))
		if o.End {
			break
		}
	}
	if kept != maxRing {
		t.Errorf("kept %d bytes, want the last %d", kept, maxRing)
	}
}

// seqOutput is what `seq 1 n` writes.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

// seqLines is how many lines of seq make more than 4 MiB.
const seqLines = 700000

// slowWriter keeps what it is given, holding its first write until
// release is closed, then sleeping at each (much slower than the command).
// first is closed when its first write comes: the reader is attached.
type slowWriter struct {
	release chan struct{}
	first   chan struct{}
	once    sync.Once
	got     bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.first) })
	<-w.release
	time.Sleep(10 * time.Millisecond)
	return w.got.Write(p)
}

// A Follow reader that is slower than the command holds it back, as a
// pipe does: more than 4 MiB of output (four times the ring) all arrive,
// in order, none dropped, though the reader's first write waits until the
// command has written half the ring. The command writes its bulk only
// once the reader is attached (its first write came): before, nobody
// holds it back and the ring keeps only its last MiB, by design.
func processFollow(t *testing.T, b sandbox.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := provision(t, b, sandbox.Spec{})
	p, err := on(t, b, s.ID).Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo go; read x; exec seq 1 " + fmt.Sprint(seqLines)}},
		sandbox.StartOptions{Stdin: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	w := &slowWriter{release: make(chan struct{}), first: make(chan struct{})}
	type result struct {
		end int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		end, err := p.Follow(ctx, 1, 0, w)
		done <- result{end, err}
	}()
	select {
	case <-w.first:
	case <-ctx.Done():
		t.Fatalf("the reader never got the command's first line: %v", ctx.Err())
	}
	if err := p.WriteStdin(ctx, []byte("x\n")); err != nil {
		t.Fatalf("WriteStdin: %v", err)
	}
	// The command fills half the ring while the reader's first write
	// waits; without back-pressure it would run on and drop.
	if _, err := p.ReadOutput(ctx, 1, maxRing/2); err != nil {
		t.Fatalf("ReadOutput(1, %d): %v", maxRing/2, err)
	}
	close(w.release)
	r := <-done
	want := append([]byte("go\n"), seqOutput(seqLines)...)
	if r.err != nil || r.end != int64(len(want)) {
		t.Fatalf("Follow: end %d, %v; want %d, nil", r.end, r.err, len(want))
	}
	if !bytes.Equal(w.got.Bytes(), want) {
		t.Errorf("Follow wrote %d bytes, not seq's %d in order", w.got.Len(), len(want))
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Errorf("Wait: %+v, %v", res, err)
	}
}

// cancelWriter cancels its Follow's ctx at its first write.
type cancelWriter struct {
	cancel context.CancelFunc
	n      int
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	w.n += len(p)
	return len(p), nil
}

// A Follow whose ctx ends returns with it and lets the command go on:
// nobody follows it then, so its output overflows the ring and drops,
// and a Follow from offset 0 says how much (ErrOutputDropped, with the
// oldest offset kept), then follows from there to the end.
func processFollowCancel(t *testing.T, b sandbox.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := provision(t, b, sandbox.Spec{})
	p, err := on(t, b, s.ID).Start(ctx, sandbox.ExecRequest{Args: []string{"seq", "1", fmt.Sprint(seqLines)}}, sandbox.StartOptions{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	w := &cancelWriter{cancel: fcancel}
	from := int64(0)
	end, err := p.Follow(fctx, 1, from, w)
	for errors.Is(err, sandbox.ErrOutputDropped) && w.n == 0 {
		// seq ran on before the Follow began (nobody followed it yet: a
		// loaded host) and the ring dropped its start: follow from the
		// oldest byte kept — again, should it drop more before this
		// Follow begins.
		from = end
		end, err = p.Follow(fctx, 1, from, w)
	}
	if !errors.Is(err, context.Canceled) || end != from+int64(w.n) {
		t.Fatalf("Follow from %d cancelled at its first write: end %d, %v; want %d, context.Canceled", from, end, err, from+int64(w.n))
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait after the follower left: %+v, %v", res, err)
	}
	want := seqOutput(seqLines)
	total := int64(len(want))
	var got bytes.Buffer
	end, err = p.Follow(ctx, 1, 0, &got)
	if !errors.Is(err, sandbox.ErrOutputDropped) || end != total-maxRing || got.Len() != 0 {
		t.Fatalf("Follow(1, 0) once overflowed: end %d, %v, %d bytes; want %d, ErrOutputDropped, none", end, err, got.Len(), total-maxRing)
	}
	end, err = p.Follow(ctx, 1, end, &got)
	if err != nil || end != total || !bytes.Equal(got.Bytes(), want[total-maxRing:]) {
		t.Errorf("Follow from the oldest kept: end %d, %v, %d bytes; want %d, nil, the last %d", end, err, got.Len(), total, maxRing)
	}
	if _, err := p.Follow(ctx, 1, total+1, &got); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Follow past the end: %v, want ErrInvalidSpec", err)
	}
}
