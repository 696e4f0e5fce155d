package manager_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

// The Manager over the Local backend: real sandboxes, few of them.

func TestManagerLocalPoolHitIsPreProvisioned(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, sandbox.LocalOptions{})
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{l}, Pool: []manager.WarmSpec{{Size: 1}}})
	if err := m.WaitPool(ctx); err != nil {
		t.Fatal(err)
	}
	warm, err := l.List(ctx)
	if err != nil || len(warm) != 1 {
		t.Fatalf("warm sandboxes: %+v, %v", warm, err)
	}
	if !pidAlive(warm[0].InitPID) {
		t.Fatalf("the warm sandbox's init %d does not run", warm[0].InitPID)
	}
	s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "agent", Labels: map[string]string{"tool": "bash"}})
	if err != nil {
		t.Fatal(err)
	}
	h, got, err := m.Lookup(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Pooled || s.SandboxID != warm[0].ID || got.InitPID != warm[0].InitPID || h.ID() != s.SandboxID || got.Backend != "local" {
		t.Fatalf("acquired %+v (init %d), want the warm %s (init %d)", s, got.InitPID, warm[0].ID, warm[0].InitPID)
	}
	var out []byte
	res, err := m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo used > /tmp/mark; cat /tmp/mark"}, Stdout: writerFunc(func(p []byte) { out = append(out, p...) })})
	if err != nil || res.ExitCode != 0 || string(out) != "used\n" {
		t.Fatalf("exec: %+v, %v, %q", res, err, out)
	}
	// Released: terminated, never back in the pool; the pool refills
	// with a new sandbox that has no trace of the old one.
	if err := m.Release(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, got)
	if err := m.WaitPool(ctx); err != nil {
		t.Fatal(err)
	}
	refill, _ := l.List(ctx)
	if len(refill) != 1 || refill[0].ID == warm[0].ID {
		t.Fatalf("after release: %+v", refill)
	}
	s2, err := m.Acquire(ctx, manager.AcquireRequest{Client: "agent"})
	if err != nil || !s2.Pooled || s2.SandboxID != refill[0].ID {
		t.Fatalf("second acquire: %+v, %v", s2, err)
	}
	if res, err := m.Exec(ctx, s2.ID, sandbox.ExecRequest{Args: []string{"test", "-e", "/tmp/mark"}}); err != nil || res.ExitCode != 1 {
		t.Errorf("the refilled sandbox sees the released one's file: %+v, %v", res, err)
	}
	if st := m.Stats(); st.PoolHits != 2 || st.Created < 2 || st.AvgProvision <= 0 || st.Active != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := m.Health(ctx); err != nil {
		t.Errorf("health: %v", err)
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestManagerLocalReaperTerminatesIdleSandbox(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, sandbox.LocalOptions{})
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{l}, ReapInterval: 20 * time.Millisecond,
		Timeouts: manager.Timeouts{Idle: 300 * time.Millisecond}})
	s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := infoOf(ctx, l, s.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	// A command longer than the idle timeout keeps it alive.
	if res, err := m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"sleep", "0.6"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("long exec: %+v, %v", res, err)
	}
	// TimeoutKills counts a sandbox once its termination has returned.
	eventually(t, "the idle sandbox to be terminated", func() bool { return m.Stats().TimeoutKills > 0 })
	if _, err := infoOf(ctx, l, s.SandboxID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the backend still has the reaped sandbox: %v", err)
	}
	assertGone(t, info)
	if st := m.Stats(); st.TimeoutKills != 1 || st.Active != 0 || st.Attached != 0 {
		t.Errorf("stats %+v, want one timeout kill and nothing active", st)
	}
	if _, err := m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("exec on the reaped lease: %v", err)
	}
}

func TestManagerLocalCloseLeavesNothing(t *testing.T) {
	ctx := context.Background()
	goroutines := runtime.NumGoroutine()
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Options{Backends: []sandbox.Backend{l}, ReapInterval: 10 * time.Millisecond, Pool: []manager.WarmSpec{{Size: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WaitPool(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "agent", Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"sleep", "337"}}) }()
	all, _ := l.List(ctx)
	if len(all) != 2 {
		t.Fatalf("sandboxes %+v, want a warm one and an acquired one", all)
	}
	time.Sleep(200 * time.Millisecond)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := l.List(ctx); err != nil || len(left) != 0 {
		t.Errorf("after the manager's Close the backend still has %+v (%v)", left, err)
	}
	for _, s := range all {
		assertGone(t, s)
	}
	assertNoProcess(t, "sleep", "337")
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
}
