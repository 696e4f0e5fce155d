package namespaces

import (
	"errors"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/rtnl"
)

// inNewNetns runs f on a thread of its own in a new network namespace.
// The thread is never returned to the Go scheduler (it exits with the
// goroutine). It needs CAP_SYS_ADMIN: the unprivileged suites check the
// same loopback through a sandbox (sandbox's TestLoopbackSegments).
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unshare(CLONE_NEWNET) needs root here; the sandbox tests cover the unprivileged case")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		f()
	}()
	<-done
}

func TestLoopbackUp(t *testing.T) {
	inNewNetns(t, func() {
		l, err := rtnl.GetLink(rtnl.LoopbackIndex)
		if err != nil {
			t.Fatal(err)
		}
		if l.Up || l.GSOMaxSize != 65536 {
			t.Fatalf("a new namespace's lo: %+v, want down with 64 KiB segments", l)
		}
		if err := loopbackUp(LoopbackGSO); err != nil {
			t.Fatal(err)
		}
		if l, err = rtnl.GetLink(rtnl.LoopbackIndex); err != nil {
			t.Fatal(err)
		}
		if !l.Up || l.GSOMaxSize != LoopbackGSO {
			t.Fatalf("lo after loopbackUp: %+v, want up with GSO %d", l, LoopbackGSO)
		}
		// IPv4's own limit exists from Linux 6.3; where the kernel reports
		// it, it must be set too.
		if l.GSOIPv4MaxSize != 0 && l.GSOIPv4MaxSize != LoopbackGSO {
			t.Fatalf("lo's IPv4 GSO limit is %d, want %d", l.GSOIPv4MaxSize, LoopbackGSO)
		}
	})
}

// TestLoopbackUpFallback: when the kernel refuses the segment limit, lo
// still comes up (through the ioctl), with the default limit.
func TestLoopbackUpFallback(t *testing.T) {
	inNewNetns(t, func() {
		// More than lo's tso_max_size: refused, and nothing is changed.
		if err := rtnl.SetUpGSO(rtnl.LoopbackIndex, 1<<30); !errors.Is(err, unix.EINVAL) {
			t.Fatalf("a 1 GiB GSO limit: %v, want EINVAL", err)
		}
		l, err := rtnl.GetLink(rtnl.LoopbackIndex)
		if err != nil {
			t.Fatal(err)
		}
		if l.Up {
			t.Fatal("a refused request brought lo up")
		}
		if err := loopbackUp(1 << 30); err != nil {
			t.Fatal(err)
		}
		if l, err = rtnl.GetLink(rtnl.LoopbackIndex); err != nil || !l.Up || l.GSOMaxSize != 65536 {
			t.Fatalf("lo after the fallback: %+v, %v; want up with 64 KiB segments", l, err)
		}
	})
}
