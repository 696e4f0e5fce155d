package ctlmsg

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "ctl")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

type msg struct {
	Text string `json:"text"`
}

// Messages of any size up to the bound arrive whole, each allocated to its
// own length, with their descriptors.
func TestRoundTrip(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, size := range []int{1, 4 << 10, 200 << 10} {
		want := strings.Repeat("x", size)
		if err := Send(a, msg{want}, []int{int(w.Fd())}); err != nil {
			t.Fatal(err)
		}
		var got msg
		fds, err := Recv(b, &got)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if got.Text != want || len(fds) != 1 {
			t.Fatalf("size %d: got %d bytes and %d fds", size, len(got.Text), len(fds))
		}
		flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("received fd is not close-on-exec: %v", err)
		}
		Close(fds)
	}
}

// A closed peer is ErrClosed, not a decoding error.
func TestRecvClosed(t *testing.T) {
	a, b := pair(t)
	a.Close()
	var m msg
	if _, err := Recv(b, &m); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after close: %v, want ErrClosed", err)
	}
}

// Recv no longer allocates MaxMessage per call.
func TestRecvAllocatesMessageSize(t *testing.T) {
	a, b := pair(t)
	var m msg
	var ms runtimeMem
	ms.read()
	before := ms.total
	for range 20 {
		if err := Send(a, msg{"hello"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := Recv(b, &m); err != nil {
			t.Fatal(err)
		}
	}
	ms.read()
	if perMsg := (ms.total - before) / 20; perMsg > 64<<10 {
		t.Fatalf("%d bytes allocated per message", perMsg)
	}
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}

// filePair is pair's sockets as NewConn's files, without package net.
func filePair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files [2]*os.File
	for i, fd := range fds {
		if files[i], err = NewConn(fd, "ctl"); err != nil {
			t.Fatal(err)
		}
		f := files[i]
		t.Cleanup(func() { f.Close() })
	}
	return files[0], files[1]
}

// NewConn's files carry messages and descriptors to a net.UnixConn and
// back, honour read deadlines, and a Recv blocked on one returns when
// it is closed; its peer's close is ErrClosed.
func TestFileConn(t *testing.T) {
	a, b := filePair(t)
	var got msg
	for _, pair := range [][2]syscall.Conn{{a, b}, {b, a}} {
		if err := Send(pair[0], msg{"over a file"}, []int{1}); err != nil {
			t.Fatal(err)
		}
		fds, err := Recv(pair[1], &got)
		if err != nil || got.Text != "over a file" || len(fds) != 1 {
			t.Fatalf("Recv: %q, %d fds, %v", got.Text, len(fds), err)
		}
		Close(fds)
	}

	if err := b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := Recv(b, &got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = b.SetReadDeadline(time.Time{})

	done := make(chan error, 1)
	go func() {
		_, err := Recv(b, &got)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		// internal/poll's ErrFileClosing, as os.File's Read returns it.
		if err == nil || !strings.Contains(err.Error(), "use of closed file") {
			t.Fatalf("Recv on a closed file: %v, want use of closed file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake a blocked Recv")
	}

	c, d := filePair(t)
	c.Close()
	if _, err := Recv(d, &got); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after the peer closed: %v, want ErrClosed", err)
	}
}

// A tail arrives byte for byte after its JSON, whatever bytes it holds
// (NULs included) and whatever the JSON's strings hold (an escaped NUL is
// not the separator); Recv refuses a message with one.
func TestTail(t *testing.T) {
	a, b := pair(t)
	tail := []byte{0, 1, 0, 0xff, '{', '"', 0}
	want := "a\x00b" // marshalled as "a\u0000b"
	if err := SendTail(a, msg{want}, tail, nil); err != nil {
		t.Fatal(err)
	}
	var got msg
	fds, gotTail, err := RecvTail(b, &got)
	if err != nil || len(fds) != 0 {
		t.Fatalf("RecvTail: %v, %d fds", err, len(fds))
	}
	if got.Text != want || string(gotTail) != string(tail) {
		t.Fatalf("got %q and tail %q, want %q and %q", got.Text, gotTail, want, tail)
	}
	if err := Send(a, msg{"x"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, gotTail, err := RecvTail(b, &got); err != nil || gotTail != nil {
		t.Fatalf("a message without a tail: tail %q, %v", gotTail, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := SendTail(a, msg{"x"}, []byte("tail"), []int{int(w.Fd())}); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	if fds, err := Recv(b, &got); err == nil || !strings.Contains(err.Error(), "unexpected bytes") || fds != nil {
		t.Fatalf("Recv of a message with a tail: %v, %v", fds, err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("Recv refusing a tail left %d descriptors open, had %d", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
