package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

func TestManagerReaperTimeouts(t *testing.T) {
	f := newFake("f", fullCaps)
	f.execBlock = make(chan struct{})
	const idle, detached, suspended = 250 * time.Millisecond, 400 * time.Millisecond, 300 * time.Millisecond
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}, ReapInterval: 10 * time.Millisecond,
		Timeouts: manager.Timeouts{Idle: idle, Detached: detached, Suspended: suspended}})
	ctx := context.Background()
	acquire := func(client string) manager.Lease {
		s, err := m.Acquire(ctx, manager.AcquireRequest{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	start := time.Now()
	idleS, detachedS, suspendedS, touched, busy := acquire("idle"), acquire("detached"), acquire("suspended"), acquire("touched"), acquire("busy")
	if err := m.Detach(ctx, detachedS.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Suspend(ctx, suspendedS.ID); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() { _, err := m.Exec(ctx, busy.ID, sandbox.ExecRequest{Args: []string{"sleep"}}); execDone <- err }()
	stopTouching := make(chan struct{})
	touchDone := make(chan struct{})
	go func() {
		defer close(touchDone)
		for {
			select {
			case <-stopTouching:
				return
			case <-time.After(20 * time.Millisecond):
				_ = m.Touch(touched.ID)
			}
		}
	}()
	ended := map[string]time.Duration{}
	eventually(t, "the idle, detached and suspended sandboxes to be reaped", func() bool {
		for _, s := range []manager.Lease{idleS, detachedS, suspendedS} {
			if _, ok := ended[s.Client]; !ok && !f.isLive(s.SandboxID) {
				ended[s.Client] = time.Since(start)
			}
		}
		return len(ended) == 3
	})
	eventually(t, "3 timeout kills", func() bool { return m.Stats().TimeoutKills == 3 })
	for client, min := range map[string]time.Duration{"idle": idle, "detached": detached, "suspended": suspended} {
		if ended[client] < min {
			t.Errorf("%s sandbox reaped after %s, before its timeout %s", client, ended[client], min)
		}
	}
	// Well past every timeout: the touched one and the one running an
	// exec are still there.
	time.Sleep(detached + 100*time.Millisecond)
	close(stopTouching)
	<-touchDone
	if !f.isLive(touched.SandboxID) || !f.isLive(busy.SandboxID) {
		t.Errorf("reaped an active sandbox: touched %v, busy %v", f.isLive(touched.SandboxID), f.isLive(busy.SandboxID))
	}
	if st := m.Stats(); st.TimeoutKills != 3 || st.Active != 2 {
		t.Errorf("stats %+v, want 3 timeout kills and 2 active", st)
	}
	if _, err := m.Lease(idleS.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("lease of a reaped sandbox: %v", err)
	}
	// Once its exec returns, the busy sandbox idles out too.
	close(f.execBlock)
	if err := <-execDone; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the formerly busy sandbox to be reaped", func() bool { return !f.isLive(busy.SandboxID) })
	eventually(t, "the formerly touched sandbox to be reaped", func() bool { return !f.isLive(touched.SandboxID) })
	eventually(t, "5 timeout kills", func() bool { return m.Stats().TimeoutKills == 5 })
}

func TestManagerNoTimeoutKeepsSandboxes(t *testing.T) {
	f := newFake("f", fullCaps)
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}, ReapInterval: 5 * time.Millisecond,
		Timeouts: manager.Timeouts{Idle: manager.NoTimeout, Detached: manager.NoTimeout, Suspended: manager.NoTimeout}})
	s, _ := m.Acquire(context.Background(), manager.AcquireRequest{Client: "c"})
	time.Sleep(100 * time.Millisecond)
	if !f.isLive(s.SandboxID) || m.Stats().TimeoutKills != 0 {
		t.Error("NoTimeout reaped a sandbox")
	}
}

// TestManagerSuspendResume: a sandbox suspended through the manager is
// under the suspended timeout until Resume, which puts it back under the
// idle one; a backend that cannot suspend leaves the lease attached.
func TestManagerSuspendResume(t *testing.T) {
	f := newFake("f", fullCaps)
	nosusp := newFake("nosusp", sandbox.Capabilities{})
	const suspended = 150 * time.Millisecond
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f, nosusp}, ReapInterval: 5 * time.Millisecond,
		Timeouts: manager.Timeouts{Idle: manager.NoTimeout, Suspended: suspended}})
	ctx := context.Background()
	l, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Suspend(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Lease(l.ID); got.State != manager.LeaseSuspended {
		t.Errorf("after Suspend: %s, want %s", got.State, manager.LeaseSuspended)
	}
	if info, _ := infoOf(ctx, f, l.SandboxID); info.State != sandbox.StateSuspended {
		t.Errorf("backend state after Suspend: %s", info.State)
	}
	back, err := m.Resume(ctx, l.ID[:5])
	if err != nil || back.ID != l.ID || back.State != manager.LeaseAttached {
		t.Fatalf("Resume: %+v, %v", back, err)
	}
	if info, _ := infoOf(ctx, f, l.SandboxID); info.State != sandbox.StateRunning {
		t.Errorf("backend state after Resume: %s", info.State)
	}
	// Resumed, it is under the idle timeout (none) again, not the
	// suspended one.
	time.Sleep(suspended + 100*time.Millisecond)
	if !f.isLive(l.SandboxID) || m.Stats().TimeoutKills != 0 {
		t.Errorf("reaped a resumed sandbox: live %v, stats %+v", f.isLive(l.SandboxID), m.Stats())
	}
	// A suspended one left alone is reaped after the suspended timeout.
	if err := m.Suspend(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the suspended sandbox to be reaped", func() bool { return !f.isLive(l.SandboxID) })
	if _, err := m.Resume(ctx, l.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Resume of a reaped lease: %v, want ErrNotFound", err)
	}

	n, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c", Selection: manager.Selection{Backend: "nosusp"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Suspend(ctx, n.ID); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Suspend without a freezer: %v, want ErrUnsupported", err)
	}
	if got, _ := m.Lease(n.ID); got.State != manager.LeaseAttached {
		t.Errorf("after a failed Suspend: %s, want %s", got.State, manager.LeaseAttached)
	}
}
