package manager_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

// These tests drive the Manager with fakeBackend: no privileges, no real
// sandboxes; local_test.go runs it over Local.

var fullCaps = sandbox.Capabilities{Snapshot: true, Suspend: true, Resume: true, NetworkPolicy: true, CgroupVersion: "v2", LandlockABI: 4}

func newManager(t *testing.T, opts manager.Options) *manager.Manager {
	t.Helper()
	m, err := manager.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func TestManagerRejectsBadOptions(t *testing.T) {
	f := newFake("f", fullCaps)
	for _, tc := range []struct {
		opts  manager.Options
		field string
	}{
		{manager.Options{}, "Options.Backends"},
		{manager.Options{Backends: []sandbox.Backend{nil}}, "Options.Backends[0]"},
		{manager.Options{Backends: []sandbox.Backend{f, newFake("f", fullCaps)}}, "Options.Backends[1]"},
		{manager.Options{Backends: []sandbox.Backend{f}, Timeouts: manager.Timeouts{Idle: -time.Second}}, "Options.Timeouts.Idle"},
		{manager.Options{Backends: []sandbox.Backend{f}, Timeouts: manager.Timeouts{Detached: -1}}, "Options.Timeouts.Detached"},
		{manager.Options{Backends: []sandbox.Backend{f}, Timeouts: manager.Timeouts{Suspended: -1}}, "Options.Timeouts.Suspended"},
		{manager.Options{Backends: []sandbox.Backend{f}, ReapInterval: -time.Millisecond}, "Options.ReapInterval"},
		{manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{}}}, "Options.Pool[0].Size"},
		{manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{Size: 1, Selection: manager.Selection{Require: []manager.Capability{"snapshot", "gpu"}}}}}, `Options.Pool[0].Require[1]: unknown capability "gpu"`},
		{manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{Size: 1, Selection: manager.Selection{Backend: "vm"}}}}, `Options.Pool[0].Backend: no backend named "vm" (have f)`},
		{manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{Size: 1}, {Size: 2}}}, "Options.Pool[1].Spec: the same spec as Pool[0]"},
	} {
		m, err := manager.New(tc.opts)
		if err == nil {
			m.Close(context.Background())
			t.Errorf("%s: accepted", tc.field)
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("got %v, want ErrInvalidOptions naming %s", err, tc.field)
		}
	}
	// A warm spec no backend can serve is refused up front.
	_, err := manager.New(manager.Options{Backends: []sandbox.Backend{newFake("nosusp", sandbox.Capabilities{})},
		Pool: []manager.WarmSpec{{Size: 1, Selection: manager.Selection{Require: []manager.Capability{manager.CapSuspend}}}}})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "nosusp lacks suspend") {
		t.Errorf("unservable warm spec: %v", err)
	}
	if live, _ := f.counts(); live != 0 {
		t.Errorf("refused options provisioned %d sandboxes", live)
	}
}

func TestManagerSelectsBackendByCapabilities(t *testing.T) {
	plain := newFake("plain", sandbox.Capabilities{Snapshot: true, CgroupVersion: "none", LandlockABI: 3})
	full := newFake("full", fullCaps)
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{plain, full}})
	ctx := context.Background()
	for _, tc := range []struct {
		sel  manager.Selection
		want string
	}{
		{manager.Selection{}, "plain"},
		{manager.Selection{Require: []manager.Capability{manager.CapSnapshot}}, "plain"},
		{manager.Selection{Require: []manager.Capability{manager.CapSuspend}}, "full"},
		{manager.Selection{Require: []manager.Capability{manager.CapCgroup}}, "full"},
		{manager.Selection{MinLandlockABI: 4}, "full"},
		{manager.Selection{Backend: "full"}, "full"},
	} {
		s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c", Selection: tc.sel})
		if err != nil || s.Backend != tc.want {
			t.Errorf("%+v: got %q, %v; want %s", tc.sel, s.Backend, err, tc.want)
		}
	}
	for _, tc := range []struct {
		req      manager.AcquireRequest
		sentinel error
		msg      string
	}{
		{manager.AcquireRequest{}, sandbox.ErrInvalidOptions, "AcquireRequest.Client"},
		{manager.AcquireRequest{Client: "c", Selection: manager.Selection{Require: []manager.Capability{"gpu"}}}, sandbox.ErrInvalidOptions, `AcquireRequest.Require[0]: unknown capability "gpu"`},
		{manager.AcquireRequest{Client: "c", Selection: manager.Selection{MinLandlockABI: -1}}, sandbox.ErrInvalidOptions, "AcquireRequest.MinLandlockABI"},
		{manager.AcquireRequest{Client: "c", Selection: manager.Selection{Backend: "vm"}}, sandbox.ErrInvalidOptions, `AcquireRequest.Backend: no backend named "vm" (have plain, full)`},
		{manager.AcquireRequest{Client: "c", Selection: manager.Selection{MinLandlockABI: 9}}, sandbox.ErrUnsupported, "plain lacks landlock ABI 9 (has 3); full lacks landlock ABI 9 (has 4)"},
		{manager.AcquireRequest{Client: "c", Selection: manager.Selection{Backend: "plain", Require: []manager.Capability{manager.CapSuspend, manager.CapResume}}}, sandbox.ErrUnsupported, "plain lacks suspend, resume"},
	} {
		_, err := m.Acquire(ctx, tc.req)
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: got %v, want %v naming %q", tc.req, err, tc.sentinel, tc.msg)
		}
	}
}

func TestManagerLeasesJoinDetachRelease(t *testing.T) {
	f := newFake("f", fullCaps)
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}})
	ctx := context.Background()
	a, err := m.Acquire(ctx, manager.AcquireRequest{Client: "alice", Labels: map[string]string{"task": "build"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != manager.LeaseAttached || a.Pooled || a.Labels["task"] != "build" || a.SandboxID == "" {
		t.Fatalf("acquired %+v", a)
	}
	// Bob joins by a unique prefix; joining again returns his lease.
	b, err := m.Join(ctx, "bob", a.SandboxID[:len(a.SandboxID)-3], map[string]string{"role": "reviewer"})
	if err != nil || b.SandboxID != a.SandboxID || b.ID == a.ID {
		t.Fatalf("join: %+v, %v", b, err)
	}
	if again, err := m.Join(ctx, "bob", a.SandboxID, nil); err != nil || again.ID != b.ID || again.Labels["role"] != "reviewer" {
		t.Fatalf("second join: %+v, %v", again, err)
	}
	if got := m.Leases(manager.LeaseFilter{Labels: map[string]string{"task": "build"}}); len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("by label: %+v", got)
	}
	if got := m.Leases(manager.LeaseFilter{SandboxID: a.SandboxID}); len(got) != 2 || got[0].ID != a.ID {
		t.Errorf("by sandbox: %+v", got)
	}
	if got, err := m.Lease(b.ID[:6]); err != nil || got.Client != "bob" {
		t.Errorf("lease by prefix: %+v, %v", got, err)
	}

	if err := m.Detach(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Lease(a.ID); s.State != manager.LeaseDetached {
		t.Errorf("after detach: %s", s.State)
	}
	if st := m.Stats(); st.Attached != 1 || st.Detached != 1 || st.Active != 1 || st.Created != 1 {
		t.Errorf("stats %+v", st)
	}
	// Releasing Bob's lease leaves the sandbox to Alice's detached one;
	// Alice joins again and gets her lease back, attached.
	if err := m.Release(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if !f.isLive(a.SandboxID) {
		t.Fatal("release terminated a sandbox that still has a lease")
	}
	if back, err := m.Join(ctx, "alice", a.SandboxID, nil); err != nil || back.ID != a.ID || back.State != manager.LeaseAttached {
		t.Fatalf("re-join: %+v, %v", back, err)
	}
	if err := m.Release(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if f.isLive(a.SandboxID) {
		t.Error("releasing the last lease left the sandbox running")
	}
	if _, err := m.Lease(a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("released lease: %v", err)
	}
	if err := m.Release(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("second release: %v", err)
	}
	if st := m.Stats(); st.Active != 0 || st.Attached != 0 || st.Detached != 0 {
		t.Errorf("stats after release %+v", st)
	}
}

func TestManagerDefaultSandboxAndPrefixes(t *testing.T) {
	f := newFake("f", fullCaps)
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}})
	ctx := context.Background()
	if _, err := m.Join(ctx, "c", "", nil); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "no default sandbox") {
		t.Errorf("join a missing default: %v", err)
	}
	s1, _ := m.Acquire(ctx, manager.AcquireRequest{Client: "a"})
	s2, _ := m.Acquire(ctx, manager.AcquireRequest{Client: "b"})
	common := s1.SandboxID[:len(s1.SandboxID)-1] // ids are sequential: f...1, f...2
	if !strings.HasPrefix(s2.SandboxID, common) {
		t.Fatalf("fake ids %s %s", s1.SandboxID, s2.SandboxID)
	}
	if err := m.SetDefault(common); !errors.Is(err, sandbox.ErrAmbiguous) || !strings.Contains(err.Error(), s1.SandboxID+", "+s2.SandboxID) {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if err := m.SetDefault("nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if err := m.SetDefault(s2.SandboxID); err != nil || m.Default() != s2.SandboxID {
		t.Fatalf("set default: %v, %q", err, m.Default())
	}
	c, err := m.Join(ctx, "c", "", nil)
	if err != nil || c.SandboxID != s2.SandboxID {
		t.Fatalf("join the default: %+v, %v", c, err)
	}
	if err := m.Terminate(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if f.isLive(s2.SandboxID) || m.Default() != "" {
		t.Errorf("terminating the default: live %v, default %q", f.isLive(s2.SandboxID), m.Default())
	}
	if got := m.Leases(manager.LeaseFilter{}); len(got) != 1 || got[0].ID != s1.ID {
		t.Errorf("leases of the terminated sandbox remain: %+v", got)
	}
	if _, err := m.Join(ctx, "c", s2.SandboxID, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("join a terminated sandbox: %v", err)
	}
}

func TestManagerCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake("f", fullCaps)
	f.delay = 100 * time.Millisecond
	m, err := manager.New(manager.Options{Backends: []sandbox.Backend{f}, ReapInterval: time.Millisecond, Pool: []manager.WarmSpec{{Size: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c", Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Detach(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	// An acquire still provisioning when Close is called ends with
	// ErrClosed, and Close waits for it: nothing survives.
	inflight := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, manager.AcquireRequest{Client: "late", Fresh: true})
		inflight <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if live, _ := f.counts(); live != 0 {
		t.Errorf("%d sandboxes alive after Close", live)
	}
	if err := <-inflight; !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("acquire during Close: %v, want ErrClosed", err)
	}
	if err := f.checkNoLeak(); err != nil {
		t.Error(err)
	}
	for name, err := range map[string]error{
		"Acquire":  func() error { _, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c"}); return err }(),
		"Join":     func() error { _, err := m.Join(ctx, "c", s.SandboxID, nil); return err }(),
		"Exec":     func() error { _, err := m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"true"}}); return err }(),
		"Health":   m.Health(ctx),
		"WaitPool": m.WaitPool(ctx),
	} {
		if !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := m.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	eventually(t, "the manager's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestManagerConcurrentUse hammers one manager from many goroutines (run
// with -race): acquires (pool hits and misses), joins, execs,
// detaches, releases, terminates, the reaper and the refill, and readers
// of stats and leases. Afterwards every sandbox was terminated exactly
// once.
func TestManagerConcurrentUse(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake("f", fullCaps)
	f.delay = time.Millisecond
	warm := sandbox.Spec{Identity: sandbox.Identity{Hostname: "warm"}}
	m, err := manager.New(manager.Options{Backends: []sandbox.Backend{f}, ReapInterval: 2 * time.Millisecond,
		Timeouts: manager.Timeouts{Idle: 30 * time.Millisecond, Detached: 10 * time.Millisecond},
		Pool:     []manager.WarmSpec{{Spec: warm, Size: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprint("client", g)
			for i := 0; i < 100; i++ {
				spec := warm
				if i%3 == 0 {
					spec = sandbox.Spec{}
				}
				s, err := m.Acquire(ctx, manager.AcquireRequest{Client: client, Spec: spec})
				if err != nil {
					errs <- err
					return
				}
				// Errors from here on are expected when the reaper, or
				// another client's Terminate, got there first.
				_, _ = m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"true"}})
				other, err := m.Join(ctx, client+"-peer", s.SandboxID, nil)
				if err == nil {
					_ = m.Detach(ctx, other.ID)
				}
				_ = m.SetDefault(s.SandboxID)
				switch i % 4 {
				case 0:
					_ = m.Terminate(ctx, s.SandboxID)
				case 1:
					_ = m.Detach(ctx, s.ID) // left to the reaper
				default:
					_ = m.Release(ctx, s.ID)
					if err == nil {
						_ = m.Release(ctx, other.ID)
					}
				}
				_ = m.Stats()
				_ = m.Leases(manager.LeaseFilter{Client: client})
				_ = m.Health(ctx)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	eventually(t, "the reaper to end a detached sandbox", func() bool { return m.Stats().TimeoutKills > 0 })
	if st := m.Stats(); st.PoolHits == 0 {
		t.Errorf("no acquire hit the pool: %+v", st)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.checkNoLeak(); err != nil {
		t.Error(err)
	}
	eventually(t, "the manager's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}
