package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

func TestManagerWarmPool(t *testing.T) {
	f := newFake("f", fullCaps)
	f.delay = 200 * time.Millisecond // a refill cannot catch up within this test's acquires
	warm := sandbox.Spec{Identity: sandbox.Identity{Hostname: "warm"}}
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{Spec: warm, Size: 2}}})
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
	var hits []manager.Lease
	for i := 0; i < 2; i++ {
		s, err := m.Acquire(ctx, manager.AcquireRequest{Client: fmt.Sprint("c", i), Spec: warm})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Pooled || s.SandboxID != prewarmed[i] {
			t.Errorf("acquire %d: %+v, want the pre-provisioned %s", i, s, prewarmed[i])
		}
		hits = append(hits, s)
	}
	// The pool is empty until the refill catches up: a miss, provisioned cold.
	miss, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c2", Spec: warm})
	if err != nil || miss.Pooled {
		t.Fatalf("acquire from an empty pool: %+v, %v", miss, err)
	}
	// Another spec, or Fresh, never touches the pool.
	other, _ := m.Acquire(ctx, manager.AcquireRequest{Client: "c3", Spec: sandbox.Spec{Identity: sandbox.Identity{Hostname: "other"}}})
	fresh, _ := m.Acquire(ctx, manager.AcquireRequest{Client: "c4", Spec: warm, Fresh: true})
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
	for _, s := range m.Leases(manager.LeaseFilter{}) {
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
	s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "c5", Spec: warm})
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
	m := newManager(t, manager.Options{Backends: []sandbox.Backend{f}, Pool: []manager.WarmSpec{{Size: 1}}})
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
