package ctlmsg

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

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
