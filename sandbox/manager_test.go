package sandbox_test

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
)

// These tests drive the Manager with fakeBackend: no privileges, no real
// sandboxes; manager_local_test.go runs it over Local.

var fullCaps = sandbox.Capabilities{Snapshot: true, Suspend: true, Resume: true, NetworkPolicy: true, CgroupVersion: "v2", LandlockABI: 4}

func newManager(t *testing.T, opts sandbox.ManagerOptions) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// eventually polls cond every 5 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestManagerRejectsBadOptions(t *testing.T) {
	f := newFake("f", fullCaps)
	for _, tc := range []struct {
		opts  sandbox.ManagerOptions
		field string
	}{
		{sandbox.ManagerOptions{}, "ManagerOptions.Backends"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{nil}}, "ManagerOptions.Backends[0]"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f, newFake("f", fullCaps)}}, "ManagerOptions.Backends[1]"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Timeouts: sandbox.Timeouts{Idle: -time.Second}}, "ManagerOptions.Timeouts.Idle"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Timeouts: sandbox.Timeouts{Detached: -1}}, "ManagerOptions.Timeouts.Detached"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Timeouts: sandbox.Timeouts{Suspended: -1}}, "ManagerOptions.Timeouts.Suspended"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, ReapInterval: -time.Millisecond}, "ManagerOptions.ReapInterval"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{}}}, "ManagerOptions.Pool[0].Size"},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{Size: 1, Selection: sandbox.Selection{Require: []sandbox.Capability{"snapshot", "gpu"}}}}}, `ManagerOptions.Pool[0].Require[1]: unknown capability "gpu"`},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{Size: 1, Selection: sandbox.Selection{Backend: "vm"}}}}, `ManagerOptions.Pool[0].Backend: no backend named "vm" (have f)`},
		{sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{Size: 1}, {Size: 2}}}, "ManagerOptions.Pool[1].Spec: the same spec as Pool[0]"},
	} {
		m, err := sandbox.NewManager(tc.opts)
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
	_, err := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{newFake("nosusp", sandbox.Capabilities{})},
		Pool: []sandbox.WarmSpec{{Size: 1, Selection: sandbox.Selection{Require: []sandbox.Capability{sandbox.CapSuspend}}}}})
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
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{plain, full}})
	ctx := context.Background()
	for _, tc := range []struct {
		sel  sandbox.Selection
		want string
	}{
		{sandbox.Selection{}, "plain"},
		{sandbox.Selection{Require: []sandbox.Capability{sandbox.CapSnapshot}}, "plain"},
		{sandbox.Selection{Require: []sandbox.Capability{sandbox.CapSuspend}}, "full"},
		{sandbox.Selection{Require: []sandbox.Capability{sandbox.CapCgroup}}, "full"},
		{sandbox.Selection{MinLandlockABI: 4}, "full"},
		{sandbox.Selection{Backend: "full"}, "full"},
	} {
		s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c", Selection: tc.sel})
		if err != nil || s.Backend != tc.want {
			t.Errorf("%+v: got %q, %v; want %s", tc.sel, s.Backend, err, tc.want)
		}
	}
	for _, tc := range []struct {
		req      sandbox.AcquireRequest
		sentinel error
		msg      string
	}{
		{sandbox.AcquireRequest{}, sandbox.ErrInvalidOptions, "AcquireRequest.Client"},
		{sandbox.AcquireRequest{Client: "c", Selection: sandbox.Selection{Require: []sandbox.Capability{"gpu"}}}, sandbox.ErrInvalidOptions, `AcquireRequest.Require[0]: unknown capability "gpu"`},
		{sandbox.AcquireRequest{Client: "c", Selection: sandbox.Selection{MinLandlockABI: -1}}, sandbox.ErrInvalidOptions, "AcquireRequest.MinLandlockABI"},
		{sandbox.AcquireRequest{Client: "c", Selection: sandbox.Selection{Backend: "vm"}}, sandbox.ErrInvalidOptions, `AcquireRequest.Backend: no backend named "vm" (have plain, full)`},
		{sandbox.AcquireRequest{Client: "c", Selection: sandbox.Selection{MinLandlockABI: 9}}, sandbox.ErrUnsupported, "plain lacks landlock ABI 9 (has 3); full lacks landlock ABI 9 (has 4)"},
		{sandbox.AcquireRequest{Client: "c", Selection: sandbox.Selection{Backend: "plain", Require: []sandbox.Capability{sandbox.CapSuspend, sandbox.CapResume}}}, sandbox.ErrUnsupported, "plain lacks suspend, resume"},
	} {
		_, err := m.Acquire(ctx, tc.req)
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: got %v, want %v naming %q", tc.req, err, tc.sentinel, tc.msg)
		}
	}
}

func TestManagerSessionsAttachDetachRelease(t *testing.T) {
	f := newFake("f", fullCaps)
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}})
	ctx := context.Background()
	a, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "alice", Labels: map[string]string{"task": "build"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != sandbox.SessionAttached || a.Pooled || a.Labels["task"] != "build" || a.SandboxID == "" {
		t.Fatalf("acquired %+v", a)
	}
	// Bob attaches by a unique prefix; attaching again returns his session.
	b, err := m.Attach(ctx, "bob", a.SandboxID[:len(a.SandboxID)-3], map[string]string{"role": "reviewer"})
	if err != nil || b.SandboxID != a.SandboxID || b.ID == a.ID {
		t.Fatalf("attach: %+v, %v", b, err)
	}
	if again, err := m.Attach(ctx, "bob", a.SandboxID, nil); err != nil || again.ID != b.ID || again.Labels["role"] != "reviewer" {
		t.Fatalf("second attach: %+v, %v", again, err)
	}
	if got := m.Sessions(sandbox.SessionFilter{Labels: map[string]string{"task": "build"}}); len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("by label: %+v", got)
	}
	if got := m.Sessions(sandbox.SessionFilter{SandboxID: a.SandboxID}); len(got) != 2 || got[0].ID != a.ID {
		t.Errorf("by sandbox: %+v", got)
	}
	if got, err := m.Session(b.ID[:6]); err != nil || got.Client != "bob" {
		t.Errorf("session by prefix: %+v, %v", got, err)
	}

	if err := m.Detach(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Session(a.ID); s.State != sandbox.SessionDetached {
		t.Errorf("after detach: %s", s.State)
	}
	if st := m.Stats(); st.Attached != 1 || st.Detached != 1 || st.Active != 1 || st.Created != 1 {
		t.Errorf("stats %+v", st)
	}
	// Releasing Bob's session leaves the sandbox to Alice's detached one;
	// Alice attaches again and gets her session back.
	if err := m.Release(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if !f.isLive(a.SandboxID) {
		t.Fatal("release terminated a sandbox that still has a session")
	}
	if back, err := m.Attach(ctx, "alice", a.SandboxID, nil); err != nil || back.ID != a.ID || back.State != sandbox.SessionAttached {
		t.Fatalf("re-attach: %+v, %v", back, err)
	}
	if err := m.Release(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if f.isLive(a.SandboxID) {
		t.Error("releasing the last session left the sandbox running")
	}
	if _, err := m.Session(a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("released session: %v", err)
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
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}})
	ctx := context.Background()
	if _, err := m.Attach(ctx, "c", "", nil); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "no default sandbox") {
		t.Errorf("attach to a missing default: %v", err)
	}
	s1, _ := m.Acquire(ctx, sandbox.AcquireRequest{Client: "a"})
	s2, _ := m.Acquire(ctx, sandbox.AcquireRequest{Client: "b"})
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
	c, err := m.Attach(ctx, "c", "", nil)
	if err != nil || c.SandboxID != s2.SandboxID {
		t.Fatalf("attach to the default: %+v, %v", c, err)
	}
	if err := m.Terminate(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if f.isLive(s2.SandboxID) || m.Default() != "" {
		t.Errorf("terminating the default: live %v, default %q", f.isLive(s2.SandboxID), m.Default())
	}
	if got := m.Sessions(sandbox.SessionFilter{}); len(got) != 1 || got[0].ID != s1.ID {
		t.Errorf("sessions of the terminated sandbox remain: %+v", got)
	}
	if _, err := m.Attach(ctx, "c", s2.SandboxID, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("attach to a terminated sandbox: %v", err)
	}
}

func TestManagerReaperTimeouts(t *testing.T) {
	f := newFake("f", fullCaps)
	f.execBlock = make(chan struct{})
	const idle, detached, suspended = 250 * time.Millisecond, 400 * time.Millisecond, 300 * time.Millisecond
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, ReapInterval: 10 * time.Millisecond,
		Timeouts: sandbox.Timeouts{Idle: idle, Detached: detached, Suspended: suspended}})
	ctx := context.Background()
	acquire := func(client string) sandbox.ClientSession {
		s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: client})
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
		for _, s := range []sandbox.ClientSession{idleS, detachedS, suspendedS} {
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
	if _, err := m.Session(idleS.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("session of a reaped sandbox: %v", err)
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
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, ReapInterval: 5 * time.Millisecond,
		Timeouts: sandbox.Timeouts{Idle: sandbox.NoTimeout, Detached: sandbox.NoTimeout, Suspended: sandbox.NoTimeout}})
	s, _ := m.Acquire(context.Background(), sandbox.AcquireRequest{Client: "c"})
	time.Sleep(100 * time.Millisecond)
	if !f.isLive(s.SandboxID) || m.Stats().TimeoutKills != 0 {
		t.Error("NoTimeout reaped a sandbox")
	}
}

func TestManagerWarmPool(t *testing.T) {
	f := newFake("f", fullCaps)
	f.delay = 200 * time.Millisecond // a refill cannot catch up within this test's acquires
	warm := sandbox.Spec{Hostname: "warm"}
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{Spec: warm, Size: 2}}})
	ctx := context.Background()
	if err := m.WaitPool(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	prewarmed := append([]string(nil), f.provisioned...)
	f.mu.Unlock()
	if st := m.Stats(); st.Pooled != 2 || st.Created != 2 || st.AvgProvision < f.delay {
		t.Fatalf("filled pool: %+v", st)
	}
	var hits []sandbox.ClientSession
	for i := 0; i < 2; i++ {
		s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: fmt.Sprint("c", i), Spec: warm})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Pooled || s.SandboxID != prewarmed[i] {
			t.Errorf("acquire %d: %+v, want the pre-provisioned %s", i, s, prewarmed[i])
		}
		hits = append(hits, s)
	}
	// The pool is empty until the refill catches up: a miss, provisioned cold.
	miss, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c2", Spec: warm})
	if err != nil || miss.Pooled {
		t.Fatalf("acquire from an empty pool: %+v, %v", miss, err)
	}
	// Another spec, or Fresh, never touches the pool.
	other, _ := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c3", Spec: sandbox.Spec{Hostname: "other"}})
	fresh, _ := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c4", Spec: warm, Fresh: true})
	if other.Pooled || fresh.Pooled {
		t.Errorf("pooled: other %v, fresh %v", other.Pooled, fresh.Pooled)
	}
	st := m.Stats()
	if st.PoolHits != 2 || st.PoolMisses != 1 || st.PoolHitRate() < 0.66 || st.PoolHitRate() > 0.67 {
		t.Errorf("stats %+v (hit rate %.2f), want 2 hits, 1 miss", st, st.PoolHitRate())
	}
	// A released pooled sandbox is terminated, not put back; the pool
	// refills with new ones.
	if err := m.Release(ctx, hits[0].ID); err != nil {
		t.Fatal(err)
	}
	if f.isLive(hits[0].SandboxID) {
		t.Error("a released warm sandbox still runs")
	}
	if err := m.WaitPool(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	for id := range f.live {
		if id == hits[0].SandboxID {
			t.Errorf("%s is back in the pool", id)
		}
	}
	f.mu.Unlock()
	if st := m.Stats(); st.Pooled != 2 {
		t.Errorf("pooled %d after refill, want 2", st.Pooled)
	}
	// A warm sandbox that ended in the pool is skipped and terminated.
	handedOut := map[string]bool{}
	for _, s := range m.Sessions(sandbox.SessionFilter{}) {
		handedOut[s.SandboxID] = true
	}
	f.mu.Lock()
	var warmIDs []string
	for id := range f.live {
		if !handedOut[id] {
			warmIDs = append(warmIDs, id)
		}
	}
	f.mu.Unlock()
	if len(warmIDs) != 2 {
		t.Fatalf("warm sandboxes %v, want 2", warmIDs)
	}
	for _, id := range warmIDs {
		f.stop(id)
	}
	s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c5", Spec: warm})
	if err != nil || s.Pooled {
		t.Errorf("acquire with only dead warm sandboxes: %+v, %v", s, err)
	}
	for _, id := range warmIDs {
		if f.isLive(id) {
			t.Errorf("dead warm sandbox %s not terminated", id)
		}
	}
}

func TestManagerPoolRefillFailureIsReported(t *testing.T) {
	f := newFake("f", fullCaps)
	f.setFail(errors.New("no more sandboxes today"))
	m := newManager(t, sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, Pool: []sandbox.WarmSpec{{Size: 1}}})
	ctx := context.Background()
	if err := m.WaitPool(ctx); err == nil || !strings.Contains(err.Error(), "no more sandboxes today") {
		t.Fatalf("WaitPool with a failing refill: %v", err)
	}
	if err := m.Health(ctx); err == nil || !strings.Contains(err.Error(), "warm pool 0: 0 of 1 ready, refill failing: no more sandboxes today") {
		t.Errorf("Health: %v", err)
	}
	f.setFail(nil)
	eventually(t, "the refill to recover", func() bool { return m.Stats().Pooled == 1 })
	if err := m.Health(ctx); err != nil {
		t.Errorf("Health after recovery: %v", err)
	}
}

func TestManagerCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake("f", fullCaps)
	f.delay = 100 * time.Millisecond
	m, err := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, ReapInterval: time.Millisecond, Pool: []sandbox.WarmSpec{{Size: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c", Fresh: true})
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
		_, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "late", Fresh: true})
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
		"Acquire":  func() error { _, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: "c"}); return err }(),
		"Attach":   func() error { _, err := m.Attach(ctx, "c", s.SandboxID, nil); return err }(),
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
// with -race): acquires (pool hits and misses), attaches, execs,
// detaches, releases, terminates, the reaper and the refill, and readers
// of stats and sessions. Afterwards every sandbox was terminated exactly
// once.
func TestManagerConcurrentUse(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake("f", fullCaps)
	f.delay = time.Millisecond
	warm := sandbox.Spec{Hostname: "warm"}
	m, err := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{f}, ReapInterval: 2 * time.Millisecond,
		Timeouts: sandbox.Timeouts{Idle: 30 * time.Millisecond, Detached: 10 * time.Millisecond},
		Pool:     []sandbox.WarmSpec{{Spec: warm, Size: 3}}})
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
				s, err := m.Acquire(ctx, sandbox.AcquireRequest{Client: client, Spec: spec})
				if err != nil {
					errs <- err
					return
				}
				// Errors from here on are expected when the reaper, or
				// another client's Terminate, got there first.
				_, _ = m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"true"}})
				other, err := m.Attach(ctx, client+"-peer", s.SandboxID, nil)
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
				_ = m.Sessions(sandbox.SessionFilter{Client: client})
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
