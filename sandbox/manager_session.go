package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// SessionState is where a client's session is.
type SessionState string

// States of a [ClientSession].
const (
	// SessionAttached: the client uses the sandbox; the idle timeout
	// applies.
	SessionAttached SessionState = "attached"
	// SessionDetached: the client left and may attach again; once every
	// client has, the detached timeout applies.
	SessionDetached SessionState = "detached"
	// SessionSuspended: the sandbox is suspended; the suspended timeout
	// applies.
	SessionSuspended SessionState = "suspended"
)

// ClientSession is one client's use of one sandbox of a [Manager]: plain
// data, a copy taken when it was returned.
type ClientSession struct {
	// ID names the session (16 hex digits); a unique prefix works too.
	ID string `json:"id"`
	// Client is who the session belongs to.
	Client string `json:"client"`
	// SandboxID and Backend name the sandbox (see [Backend.Get]).
	SandboxID string `json:"sandbox_id"`
	Backend   string `json:"backend"`
	// Labels are the client's, given to Acquire or Attach.
	Labels map[string]string `json:"labels,omitempty"`
	// State is the session's state when it was returned.
	State SessionState `json:"state"`
	// Created is when the client acquired or attached.
	Created time.Time `json:"created"`
	// LastActive is the sandbox's last activity through the manager.
	LastActive time.Time `json:"last_active"`
	// Pooled reports that the sandbox came from the warm pool.
	Pooled bool `json:"pooled,omitempty"`
}

// AcquireRequest asks a [Manager] for a sandbox.
type AcquireRequest struct {
	// Client names who asks (required); sessions are listed by client.
	Client string
	// Spec describes the sandbox; a warm sandbox of an equal spec is
	// taken from the pool when there is one.
	Spec Spec
	// Labels are attached to the session.
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
// req.Selection (ErrUnsupported when none does).
func (m *Manager) Acquire(ctx context.Context, req AcquireRequest) (ClientSession, error) {
	if req.Client == "" {
		return ClientSession{}, fmt.Errorf("%w: AcquireRequest.Client is empty: name the client", ErrInvalidOptions)
	}
	if err := req.Selection.validate("AcquireRequest"); err != nil {
		return ClientSession{}, err
	}
	m.mu.Lock()
	err := m.begin()
	m.mu.Unlock()
	if err != nil {
		return ClientSession{}, err
	}
	defer m.busy.Done()
	if !req.Fresh {
		if b, s, ok := m.takeWarm(ctx, specKey(req.Spec), req.Selection); ok {
			cs, err := m.register(ctx, b, s, true, req.Client, req.Labels)
			m.pool.kick()
			return cs, err
		}
	}
	b, err := req.Selection.choose(m.backends, "AcquireRequest")
	if err != nil {
		return ClientSession{}, err
	}
	start := time.Now()
	s, err := b.Provision(ctx, req.Spec)
	if err != nil {
		return ClientSession{}, err
	}
	m.mu.Lock()
	m.recordProvision(time.Since(start))
	m.mu.Unlock()
	return m.register(ctx, b, s, false, req.Client, req.Labels)
}

// register makes s a managed sandbox with one attached session; the
// sandbox is terminated when the manager has closed meanwhile.
func (m *Manager) register(ctx context.Context, b Backend, s Info, pooled bool, client string, labels map[string]string) (ClientSession, error) {
	now := time.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = b.Terminate(context.WithoutCancel(ctx), s.ID)
		return ClientSession{}, ErrClosed
	}
	box := &managedBox{id: s.ID, backend: b, pooled: pooled, created: now, lastActive: now, sessions: map[string]*clientSession{}}
	m.boxes[box.id] = box
	cs := m.newSession(box, client, labels, now)
	out := m.view(cs)
	m.mu.Unlock()
	m.log.Debug("sandbox acquired", "sandbox", s.ID, "backend", b.Name(), "client", client, "pooled", pooled)
	return out, nil
}

// newSession attaches client to box; m.mu is held.
func (m *Manager) newSession(box *managedBox, client string, labels map[string]string, now time.Time) *clientSession {
	cs := &clientSession{id: NewID(), client: client, labels: maps.Clone(labels), created: now, box: box}
	m.sessions[cs.id] = cs
	box.sessions[cs.id] = cs
	box.detachedAt = time.Time{}
	return cs
}

// view copies cs out; m.mu is held.
func (m *Manager) view(cs *clientSession) ClientSession {
	st := SessionAttached
	switch {
	case !cs.box.suspendedAt.IsZero():
		st = SessionSuspended
	case cs.detached:
		st = SessionDetached
	}
	return ClientSession{ID: cs.id, Client: cs.client, SandboxID: cs.box.id, Backend: cs.box.backend.Name(),
		Labels: maps.Clone(cs.labels), State: st, Created: cs.created, LastActive: cs.box.lastActive, Pooled: cs.box.pooled}
}

// session resolves a session id (or unique prefix); m.mu is held.
func (m *Manager) session(ref string) (*clientSession, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if cs, ok := m.sessions[ref]; ok {
		return cs, nil
	}
	id, err := resolveRef(ref, slices.Collect(maps.Keys(m.sessions)), "session")
	if err != nil {
		return nil, err
	}
	return m.sessions[id], nil
}

// box resolves a sandbox id (or unique prefix, or "" for the default);
// m.mu is held.
func (m *Manager) box(ref string) (*managedBox, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if ref == "" {
		if m.def == "" {
			return nil, &refError{msg: "no default sandbox (see Manager.SetDefault)", kind: ErrNotFound}
		}
		ref = m.def
	}
	box, ok := m.boxes[ref]
	if !ok {
		id, err := resolveRef(ref, slices.Collect(maps.Keys(m.boxes)), "sandbox")
		if err != nil {
			return nil, err
		}
		box = m.boxes[id]
	}
	if box.ending {
		return nil, fmt.Errorf("%w: sandbox %s is being terminated", ErrTerminated, box.id)
	}
	return box, nil
}

// Attach attaches client to a running sandbox of the manager: sandboxID
// is its id, a unique prefix, or "" for the default sandbox. A client
// already attached gets its session back; a detached one is attached
// again (labels, when not nil, replace the session's).
func (m *Manager) Attach(ctx context.Context, client, sandboxID string, labels map[string]string) (ClientSession, error) {
	if client == "" {
		return ClientSession{}, fmt.Errorf("%w: Attach: the client is empty: name the client", ErrInvalidOptions)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	box, err := m.box(sandboxID)
	if err != nil {
		return ClientSession{}, err
	}
	now := time.Now()
	box.lastActive = now
	for _, cs := range box.sessions {
		if cs.client == client {
			cs.detached = false
			box.detachedAt = time.Time{}
			if labels != nil {
				cs.labels = maps.Clone(labels)
			}
			return m.view(cs), nil
		}
	}
	return m.view(m.newSession(box, client, labels, now)), nil
}

// Detach marks the session detached: the sandbox keeps running, and once
// no client is attached the detached timeout applies. It is idempotent.
func (m *Manager) Detach(ctx context.Context, sessionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs, err := m.session(sessionID)
	if err != nil {
		return err
	}
	cs.detached = true
	if attached(cs.box) == 0 && cs.box.detachedAt.IsZero() {
		cs.box.detachedAt = time.Now()
	}
	return nil
}

func attached(box *managedBox) int {
	n := 0
	for _, cs := range box.sessions {
		if !cs.detached {
			n++
		}
	}
	return n
}

// Release ends the session. When it was the sandbox's last session, the
// sandbox is terminated — never returned to the pool, whatever it ran;
// the pool replaces what Acquire took from it on its own.
func (m *Manager) Release(ctx context.Context, sessionID string) error {
	m.mu.Lock()
	cs, err := m.session(sessionID)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	delete(m.sessions, cs.id)
	delete(cs.box.sessions, cs.id)
	box := cs.box
	if len(box.sessions) > 0 || !m.startEnding(box) {
		if attached(box) == 0 && box.detachedAt.IsZero() {
			box.detachedAt = time.Now()
		}
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	return m.finishEnding(ctx, box, "released")
}

// Terminate terminates a sandbox of the manager (its id, a unique prefix,
// or "" for the default) and ends all of its sessions.
func (m *Manager) Terminate(ctx context.Context, sandboxID string) error {
	m.mu.Lock()
	box, err := m.box(sandboxID)
	if err == nil && !m.startEnding(box) {
		err = ErrClosed
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
	err := box.backend.Terminate(ctx, box.id)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	m.mu.Lock()
	m.drop(box)
	m.mu.Unlock()
	m.log.Debug("sandbox ended", "sandbox", box.id, "why", why, "err", err)
	return err
}

// drop forgets box and its sessions; m.mu is held.
func (m *Manager) drop(box *managedBox) {
	if m.boxes[box.id] == box {
		delete(m.boxes, box.id)
	}
	for id := range box.sessions {
		delete(m.sessions, id)
	}
	if m.def == box.id {
		m.def = ""
	}
}

// activity looks up a session for an operation on its sandbox and
// records the activity; m.mu is held.
func (m *Manager) activity(sessionID string) (*managedBox, error) {
	cs, err := m.session(sessionID)
	if err != nil {
		return nil, err
	}
	if cs.box.ending {
		return nil, fmt.Errorf("%w: sandbox %s is being terminated", ErrTerminated, cs.box.id)
	}
	cs.box.lastActive = time.Now()
	return cs.box, nil
}

// Touch records activity on the session's sandbox, for clients that use
// the backend directly (see Lookup).
func (m *Manager) Touch(sessionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.activity(sessionID)
	return err
}

// Exec runs req in the session's sandbox (see [Backend.Exec]). The
// sandbox is not idle while the command runs.
func (m *Manager) Exec(ctx context.Context, sessionID string, req ExecRequest) (*ExecResult, error) {
	m.mu.Lock()
	box, err := m.activity(sessionID)
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
	return box.backend.Exec(ctx, box.id, req)
}

// Lookup returns the session's backend and its description of the
// sandbox, for what the manager does not wrap (Snapshot, Fork,
// SetNetworkPolicy, Mount, files through [Local.Sandbox]).
// It counts as activity.
func (m *Manager) Lookup(ctx context.Context, sessionID string) (Backend, Info, error) {
	m.mu.Lock()
	box, err := m.activity(sessionID)
	m.mu.Unlock()
	if err != nil {
		return nil, Info{}, err
	}
	s, err := box.backend.Get(ctx, box.id)
	return box.backend, s, err
}

// Suspend freezes the session's sandbox; the suspended timeout applies
// until Resume.
func (m *Manager) Suspend(ctx context.Context, sessionID string) error {
	m.mu.Lock()
	box, err := m.activity(sessionID)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := box.backend.Suspend(ctx, box.id); err != nil {
		return err
	}
	m.mu.Lock()
	if box.suspendedAt.IsZero() {
		box.suspendedAt = time.Now()
	}
	m.mu.Unlock()
	return nil
}

// Resume thaws the session's sandbox, or provisions it again from its
// latest snapshot when it has ended (see [Backend.Resume]).
func (m *Manager) Resume(ctx context.Context, sessionID string) (ClientSession, error) {
	m.mu.Lock()
	box, err := m.activity(sessionID)
	m.mu.Unlock()
	if err != nil {
		return ClientSession{}, err
	}
	if _, err := box.backend.Resume(ctx, box.id); err != nil {
		return ClientSession{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	box.suspendedAt, box.lastActive = time.Time{}, time.Now()
	cs, err := m.session(sessionID)
	if err != nil {
		return ClientSession{}, err
	}
	return m.view(cs), nil
}

// Session returns a session by id or unique prefix.
func (m *Manager) Session(sessionID string) (ClientSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs, err := m.session(sessionID)
	if err != nil {
		return ClientSession{}, err
	}
	return m.view(cs), nil
}

// SessionFilter selects sessions; zero fields match everything.
type SessionFilter struct {
	// Client, when not "", selects that client's sessions.
	Client string
	// SandboxID, when not "", selects the sessions of that sandbox (its
	// exact id).
	SandboxID string
	// Labels must all be present with these values.
	Labels map[string]string
}

// Sessions lists the sessions f selects, oldest first.
func (m *Manager) Sessions(f SessionFilter) []ClientSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ClientSession
	for _, cs := range m.sessions {
		if f.Client != "" && cs.client != f.Client || f.SandboxID != "" && cs.box.id != f.SandboxID {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if got, ok := cs.labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, m.view(cs))
		}
	}
	slices.SortFunc(out, func(a, b ClientSession) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// SetDefault makes a sandbox of the manager (its id or a unique prefix)
// the default one, which Attach with an empty id attaches to; ""
// clears it. Terminating the default sandbox clears it too.
func (m *Manager) SetDefault(sandboxID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sandboxID == "" {
		if m.closed {
			return ErrClosed
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
