package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

// box resolves a sandbox id (or unique prefix, or "" for the default);
// m.mu is held.
func (m *Manager) box(sbRef string) (*managedBox, error) {
	if m.closed {
		return nil, sandbox.ErrClosed
	}
	if sbRef == "" {
		if m.def == "" {
			return nil, ref.NotFound("no default sandbox (see Manager.SetDefault)")
		}
		sbRef = m.def
	}
	box, ok := m.boxes[sbRef]
	if !ok {
		id, err := ref.Resolve(sbRef, slices.Collect(maps.Keys(m.boxes)), "sandbox")
		if err != nil {
			return nil, err
		}
		box = m.boxes[id]
	}
	if box.ending {
		return nil, fmt.Errorf("%w: sandbox %s is being terminated", sandbox.ErrTerminated, box.id)
	}
	return box, nil
}

// Terminate terminates a sandbox of the manager (its id, a unique prefix,
// or "" for the default) and ends all of its leases.
func (m *Manager) Terminate(ctx context.Context, sandboxID string) error {
	m.mu.Lock()
	box, err := m.box(sandboxID)
	if err == nil && !m.startEnding(box) {
		err = sandbox.ErrClosed
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.finishEnding(ctx, box, "terminated")
}

// startEnding marks box as being terminated, for finishEnding; false
// when it already is or the manager has closed (Close terminates it).
// m.mu is held.
func (m *Manager) startEnding(box *managedBox) bool {
	if box.ending || m.begin() != nil {
		return false
	}
	box.ending = true
	return true
}

// finishEnding terminates box, marked by startEnding, and forgets it.
func (m *Manager) finishEnding(ctx context.Context, box *managedBox, why string) error {
	defer m.busy.Done()
	err := box.h.Terminate(ctx)
	if errors.Is(err, sandbox.ErrNotFound) {
		err = nil
	}
	m.mu.Lock()
	m.drop(box)
	m.mu.Unlock()
	m.log.Debug("sandbox ended", "sandbox", box.id, "why", why, "err", err)
	return err
}

// drop forgets box and its leases; m.mu is held.
func (m *Manager) drop(box *managedBox) {
	if m.boxes[box.id] == box {
		delete(m.boxes, box.id)
	}
	for id := range box.leases {
		delete(m.leases, id)
	}
	if m.def == box.id {
		m.def = ""
	}
}

// SetDefault makes a sandbox of the manager (its id or a unique prefix)
// the default one, which Join with an empty id joins; "" clears it.
// Terminating the default sandbox clears it too.
func (m *Manager) SetDefault(sandboxID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sandboxID == "" {
		if m.closed {
			return sandbox.ErrClosed
		}
		m.def = ""
		return nil
	}
	box, err := m.box(sandboxID)
	if err != nil {
		return err
	}
	m.def = box.id
	return nil
}

// Default returns the default sandbox's id ("" when there is none).
func (m *Manager) Default() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.def
}

// activity looks up a lease for an operation on its sandbox and records
// the activity; m.mu is held.
func (m *Manager) activity(leaseID string) (*managedBox, error) {
	l, err := m.findLease(leaseID)
	if err != nil {
		return nil, err
	}
	if l.box.ending {
		return nil, fmt.Errorf("%w: sandbox %s is being terminated", sandbox.ErrTerminated, l.box.id)
	}
	l.box.lastActive = time.Now()
	return l.box, nil
}

// Touch records activity on the lease's sandbox, for clients that use
// the backend directly (see Lookup).
func (m *Manager) Touch(leaseID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.activity(leaseID)
	return err
}

// Exec runs req in the lease's sandbox (see [sandbox.Handle.Exec]).
// The sandbox is not idle while the command runs.
func (m *Manager) Exec(ctx context.Context, leaseID string, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	m.mu.Lock()
	box, err := m.activity(leaseID)
	if err == nil {
		box.running++
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer func() {
		m.mu.Lock()
		box.running--
		box.lastActive = time.Now()
		m.mu.Unlock()
	}()
	return box.h.Exec(ctx, req)
}

// Lookup returns the lease's sandbox handle and its description of the
// sandbox, for what the manager does not wrap (Snapshot, SetNetworkPolicy,
// Mount, File, Usage). It counts as activity.
func (m *Manager) Lookup(ctx context.Context, leaseID string) (sandbox.Handle, sandbox.Info, error) {
	m.mu.Lock()
	box, err := m.activity(leaseID)
	m.mu.Unlock()
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	s, err := box.h.Info(ctx)
	return box.h, s, err
}

// Suspend freezes the lease's sandbox; the suspended timeout applies
// until Resume.
func (m *Manager) Suspend(ctx context.Context, leaseID string) error {
	m.mu.Lock()
	box, err := m.activity(leaseID)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := box.h.Suspend(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	if box.suspendedAt.IsZero() {
		box.suspendedAt = time.Now()
	}
	m.mu.Unlock()
	return nil
}

// Resume thaws the lease's sandbox, or provisions it again from its
// latest snapshot when it has ended (see [sandbox.Handle.Resume]);
// the idle or detached timeout applies again.
func (m *Manager) Resume(ctx context.Context, leaseID string) (Lease, error) {
	m.mu.Lock()
	box, err := m.activity(leaseID)
	m.mu.Unlock()
	if err != nil {
		return Lease{}, err
	}
	if _, err := box.h.Resume(ctx); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	box.suspendedAt, box.lastActive = time.Time{}, time.Now()
	l, err := m.findLease(leaseID)
	if err != nil {
		return Lease{}, err
	}
	return m.view(l), nil
}
