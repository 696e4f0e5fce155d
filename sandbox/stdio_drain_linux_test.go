package sandbox

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
)

// stallWriter holds its first Write until released, as a copy goroutine
// that a loaded machine does not run for a while.
type stallWriter struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	entered  chan struct{}
	release  chan struct{}
	stalling bool
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if !w.stalling {
		w.stalling = true
		close(w.entered)
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestOutputCutOffKeepsWhatThePipeHolds: a command has exited, a
// background process still holds its stdout, and the copy of the output
// is late (here: stalled in the caller's writer) when wait's grace runs
// out. The cut-off must end the wait for more output, never drop what the
// command already wrote (TestSandboxConcurrentExecs lost an exec's whole
// output so on an emulated, loaded machine).
func TestOutputCutOffKeepsWhatThePipeHolds(t *testing.T) {
	w := &stallWriter{entered: make(chan struct{}), release: make(chan struct{})}
	s, err := openStdio(nil, w, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	child := s.files()[1]
	if _, err := child.Write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	<-w.entered // the copy holds "first", stalled in Write
	if _, err := child.Write([]byte("second\n")); err != nil {
		t.Fatal(err)
	}
	// child stays open: a background process that keeps the pipe.
	defer child.Close()
	done := make(chan struct{})
	go func() { s.wait(0); close(done) }()
	// wait(0) cuts at once; let the copy go on only after that.
	waitCut(t, s)
	close(w.release)
	<-done
	if got := w.buf.String(); got != "first\nsecond\n" {
		t.Fatalf("copied %q, want both lines", got)
	}
}

// waitCut waits until wait has cut stdout's copy off (its read deadline
// is set: a read returns at once). That copy is stalled, so nothing
// clears the deadline meanwhile.
func waitCut(t *testing.T, s *stdio) {
	t.Helper()
	f := s.outReads[0]
	for {
		rc, err := f.SyscallConn()
		if err != nil {
			return // closed: cut off too
		}
		// With no deadline, RawRead calls the function, which asks for
		// no wait; once one is set, it reports its error without reading.
		if err := rc.Read(func(uintptr) bool { return true }); err != nil {
			return
		}
		runtime.Gosched()
	}
}
