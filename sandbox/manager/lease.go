package manager

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

// LeaseState is where a client's lease is.
type LeaseState string

// States of a [Lease].
const (
	// LeaseAttached: the client uses the sandbox; the idle timeout
	// applies.
	LeaseAttached LeaseState = "attached"
	// LeaseDetached: the client left and may join again; once every
	// client has, the detached timeout applies.
	LeaseDetached LeaseState = "detached"
	// LeaseSuspended: the sandbox is suspended; the suspended timeout
	// applies.
	LeaseSuspended LeaseState = "suspended"
)

// Lease is one client's use of one sandbox of a [Manager]: plain data, a
// copy taken when it was returned.
type Lease struct {
	// ID names the lease (16 hex digits); a unique prefix works too.
	ID string `json:"id"`
	// Client is who holds the lease.
	Client string `json:"client"`
	// SandboxID and Backend name the sandbox (see
	// [sandbox.Backend.Open]).
	SandboxID string `json:"sandbox_id"`
	Backend   string `json:"backend"`
	// Labels are the client's, given to Acquire or Join.
	Labels map[string]string `json:"labels,omitempty"`
	// State is the lease's state when it was returned.
	State LeaseState `json:"state"`
	// Created is when the client acquired or joined.
	Created time.Time `json:"created"`
	// LastActive is the sandbox's last activity through the manager.
	LastActive time.Time `json:"last_active"`
	// Pooled reports that the sandbox came from the warm pool.
	Pooled bool `json:"pooled,omitempty"`
}

// AcquireRequest asks a [Manager] for a sandbox.
type AcquireRequest struct {
	// Client names who asks (required); leases are listed by client.
	Client string
	// Spec describes the sandbox; a warm sandbox of an equal spec is
	// taken from the pool when there is one.
	Spec sandbox.Spec
	// Labels are attached to the lease.
	Labels map[string]string
	// Fresh skips the pool: the sandbox is provisioned for this request.
	Fresh bool
	// Selection chooses the backend; a warm sandbox qualifies only when
	// its backend does.
	Selection
}

// Acquire gives req.Client a sandbox of req.Spec, attached: a warm one
// from the pool when one matches (the pool then refills in the
// background), else a new one from the first backend that satisfies
// req.Selection ([sandbox.ErrUnsupported] when none does).
func (m *Manager) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Client == "" {
		return Lease{}, fmt.Errorf("%w: AcquireRequest.Client is empty: name the client", sandbox.ErrInvalidOptions)
	}
	if err := req.Selection.validate("AcquireRequest"); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	err := m.begin()
	m.mu.Unlock()
	if err != nil {
		return Lease{}, err
	}
	defer m.busy.Done()
	if !req.Fresh {
		if w, ok := m.takeWarm(ctx, specKey(req.Spec), req.Selection); ok {
			l, err := m.register(ctx, w, true, req.Client, req.Labels)
			m.pool.kick()
			return l, err
		}
	}
	b, err := req.Selection.choose(m.backends, "AcquireRequest")
	if err != nil {
		return Lease{}, err
	}
	start := time.Now()
	s, h, err := provision(ctx, b, req.Spec)
	if err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	m.recordProvision(time.Since(start))
	m.mu.Unlock()
	return m.register(ctx, warmBox{b, h, s}, false, req.Client, req.Labels)
}

// provision provisions spec on b and opens the new sandbox's handle; a
// sandbox it cannot open is terminated.
func provision(ctx context.Context, b sandbox.Backend, spec sandbox.Spec) (sandbox.Info, sandbox.Handle, error) {
	s, err := b.Provision(ctx, spec)
	if err != nil {
		return sandbox.Info{}, nil, err
	}
	h, err := b.Open(context.WithoutCancel(ctx), s.ID)
	if err != nil {
		return sandbox.Info{}, nil, fmt.Errorf("opening the new sandbox %s: %w", s.ID, err)
	}
	return s, h, nil
}

// register makes s a managed sandbox with one attached lease; the
// sandbox is terminated when the manager has closed meanwhile.
func (m *Manager) register(ctx context.Context, w warmBox, pooled bool, client string, labels map[string]string) (Lease, error) {
	now := time.Now()
	b, s := w.backend, w.info
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = w.h.Terminate(context.WithoutCancel(ctx))
		return Lease{}, sandbox.ErrClosed
	}
	box := &managedBox{id: s.ID, backend: b, h: w.h, pooled: pooled, created: now, lastActive: now, leases: map[string]*lease{}}
	m.boxes[box.id] = box
	l := m.newLease(box, client, labels, now)
	out := m.view(l)
	m.mu.Unlock()
	m.log.Debug("sandbox acquired", "sandbox", s.ID, "backend", b.Name(), "client", client, "pooled", pooled)
	return out, nil
}

// newLease gives client an attached lease on box; m.mu is held.
func (m *Manager) newLease(box *managedBox, client string, labels map[string]string, now time.Time) *lease {
	l := &lease{id: newLeaseID(), client: client, labels: maps.Clone(labels), created: now, box: box}
	m.leases[l.id] = l
	box.leases[l.id] = l
	box.detachedAt = time.Time{}
	return l
}

// view copies l out; m.mu is held.
func (m *Manager) view(l *lease) Lease {
	st := LeaseAttached
	switch {
	case !l.box.suspendedAt.IsZero():
		st = LeaseSuspended
	case l.detached:
		st = LeaseDetached
	}
	return Lease{ID: l.id, Client: l.client, SandboxID: l.box.id, Backend: l.box.backend.Name(),
		Labels: maps.Clone(l.labels), State: st, Created: l.created, LastActive: l.box.lastActive, Pooled: l.box.pooled}
}

// findLease resolves a lease id (or unique prefix); m.mu is held.
func (m *Manager) findLease(leaseRef string) (*lease, error) {
	if m.closed {
		return nil, sandbox.ErrClosed
	}
	if l, ok := m.leases[leaseRef]; ok {
		return l, nil
	}
	id, err := ref.Resolve(leaseRef, slices.Collect(maps.Keys(m.leases)), "lease")
	if err != nil {
		return nil, err
	}
	return m.leases[id], nil
}

// Join gives client a lease on a running sandbox of the manager:
// sandboxID is its id, a unique prefix, or "" for the default sandbox. A
// client that already holds a lease on it gets that lease back, attached
// again if it was detached (labels, when not nil, replace the lease's).
func (m *Manager) Join(ctx context.Context, client, sandboxID string, labels map[string]string) (Lease, error) {
	if client == "" {
		return Lease{}, fmt.Errorf("%w: Join: the client is empty: name the client", sandbox.ErrInvalidOptions)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	box, err := m.box(sandboxID)
	if err != nil {
		return Lease{}, err
	}
	now := time.Now()
	box.lastActive = now
	for _, l := range box.leases {
		if l.client == client {
			l.detached = false
			box.detachedAt = time.Time{}
			if labels != nil {
				l.labels = maps.Clone(labels)
			}
			return m.view(l), nil
		}
	}
	return m.view(m.newLease(box, client, labels, now)), nil
}

// Detach marks the lease detached: the sandbox keeps running, and once
// no client is attached the detached timeout applies. It is idempotent.
func (m *Manager) Detach(ctx context.Context, leaseID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.findLease(leaseID)
	if err != nil {
		return err
	}
	l.detached = true
	if attached(l.box) == 0 && l.box.detachedAt.IsZero() {
		l.box.detachedAt = time.Now()
	}
	return nil
}

// attached counts box's attached leases; m.mu is held.
func attached(box *managedBox) int {
	n := 0
	for _, l := range box.leases {
		if !l.detached {
			n++
		}
	}
	return n
}

// Release ends the lease. When it was the sandbox's last lease, the
// sandbox is terminated — never returned to the pool, whatever it ran;
// the pool replaces what Acquire took from it on its own.
func (m *Manager) Release(ctx context.Context, leaseID string) error {
	m.mu.Lock()
	l, err := m.findLease(leaseID)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	delete(m.leases, l.id)
	delete(l.box.leases, l.id)
	box := l.box
	if len(box.leases) > 0 || !m.startEnding(box) {
		if attached(box) == 0 && box.detachedAt.IsZero() {
			box.detachedAt = time.Now()
		}
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	return m.finishEnding(ctx, box, "released")
}

// Lease returns a lease by id or unique prefix.
func (m *Manager) Lease(leaseID string) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.findLease(leaseID)
	if err != nil {
		return Lease{}, err
	}
	return m.view(l), nil
}

// LeaseFilter selects leases; zero fields match everything.
type LeaseFilter struct {
	// Client, when not "", selects that client's leases.
	Client string
	// SandboxID, when not "", selects the leases on that sandbox (its
	// exact id).
	SandboxID string
	// Labels must all be present with these values.
	Labels map[string]string
}

// Leases lists the leases f selects, oldest first.
func (m *Manager) Leases(f LeaseFilter) []Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, l := range m.leases {
		if f.Client != "" && l.client != f.Client || f.SandboxID != "" && l.box.id != f.SandboxID {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if got, ok := l.labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, m.view(l))
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out
}
