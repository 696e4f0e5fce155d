package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

// localHandle is a [Handle] on one sandbox of a [Local]. It keeps the id
// alone: each call finds the sandbox's current incarnation (Resume from
// a snapshot replaces it) and fails with ErrNotFound once it is
// terminated.
type localHandle struct {
	l  *Local
	id string
}

var _ Handle = (*localHandle)(nil)

func (h *localHandle) ID() string { return h.id }

// box finds the handle's sandbox.
func (h *localHandle) box() (*localBox, error) {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.l.lookup(h.id)
}

// sandbox returns the handle's current incarnation.
func (h *localHandle) sandbox() (*Sandbox, error) { return h.l.sandbox(h.id) }

// Info describes the sandbox now.
func (h *localHandle) Info(ctx context.Context) (Info, error) {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	b, err := h.l.lookup(h.id)
	if err != nil {
		return Info{}, err
	}
	return b.info(), nil
}

// Exec runs req in the sandbox (see [Sandbox.Exec]).
func (h *localHandle) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Exec(ctx, req)
}

// Start starts a process the sandbox owns (see [Sandbox.StartProcess]).
func (h *localHandle) Start(ctx context.Context, req ExecRequest, opts StartOptions) (Process, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.StartProcess(ctx, req, opts)
}

// Process finds the process pid (see [Sandbox.Process]).
func (h *localHandle) Process(ctx context.Context, pid int) (Process, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Process(ctx, pid)
}

// Processes lists the sandbox's processes (see [Sandbox.Processes]).
func (h *localHandle) Processes(ctx context.Context) ([]ProcessInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Processes(ctx)
}

// Mount adds m to the running sandbox (see [Sandbox.Mount]).
func (h *localHandle) Mount(ctx context.Context, m Mount) error {
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.Mount(ctx, m)
}

// SetLimits changes the running sandbox's limits (see
// [Sandbox.SetLimits]).
func (h *localHandle) SetLimits(ctx context.Context, l Limits) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.SetLimits(ctx, l)
}

// SetNetworkPolicy replaces a limited sandbox's rules (see
// [Sandbox.SetNetworkPolicy]).
func (h *localHandle) SetNetworkPolicy(ctx context.Context, p NetworkPolicy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.SetNetworkPolicy(ctx, p)
}

// Usage reads what the sandbox uses now (see [Sandbox.Usage]).
func (h *localHandle) Usage(ctx context.Context) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	sb, err := h.sandbox()
	if err != nil {
		return Usage{}, err
	}
	return sb.Usage()
}

// Dial connects to port of the sandbox's loopback (see
// [Sandbox.DialPort]).
func (h *localHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.DialPort(ctx, port)
}

// Suspend freezes the sandbox (see [Sandbox.Suspend]).
func (h *localHandle) Suspend(ctx context.Context) error {
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.Suspend(ctx)
}

// Stop kills every process of the sandbox and releases what it held,
// as Terminate does, but keeps it under its id, stopped, for Resume. It
// waits for a Resume under way.
func (h *localHandle) Stop(ctx context.Context) error {
	b, err := h.box()
	if err != nil {
		return err
	}
	b.reviving.Lock()
	defer b.reviving.Unlock()
	h.l.mu.Lock()
	sb, gone := b.sb, b.gone
	h.l.mu.Unlock()
	if gone {
		return fmt.Errorf("%w: sandbox %s", ErrTerminated, b.id)
	}
	h.l.log.Debug("sandbox stopped", "id", b.id)
	return sb.Terminate(ctx)
}

// Terminate kills the sandbox and forgets it; its snapshots stay.
func (h *localHandle) Terminate(ctx context.Context) error {
	l := h.l
	l.mu.Lock()
	b, err := l.lookup(h.id)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	b.gone = true
	delete(l.boxes, b.id)
	sb := b.sb
	l.mu.Unlock()
	l.log.Debug("sandbox terminated", "id", b.id)
	return sb.Terminate(ctx)
}

// Snapshot saves the sandbox's writable layers into the snapshot store
// (see [Sandbox.Snapshot]); the snapshot records the sandbox's id, which
// Resume looks for.
func (h *localHandle) Snapshot(ctx context.Context) (*Snapshot, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	dir, _, err := h.l.snapshotDir(true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the snapshot directory: %w", err)
	}
	return sb.Snapshot(ctx, dir, SnapshotOptions{SandboxID: h.id})
}

// Resume thaws a suspended sandbox (a running one is left as it is). A
// sandbox that has ended (StateStopped: its Limits.Timeout ran out, or
// its init died) is cleaned up and provisioned again, under the same id,
// from the latest snapshot taken of it (see [Fork]); without one it
// fails with ErrTerminated.
func (h *localHandle) Resume(ctx context.Context) (Info, error) {
	l := h.l
	b, err := h.box()
	if err != nil {
		return Info{}, err
	}
	b.reviving.Lock() // one re-provisioning at a time
	defer b.reviving.Unlock()
	l.mu.Lock()
	sb, gone := b.sb, b.gone
	l.mu.Unlock()
	if gone {
		return Info{}, fmt.Errorf("%w: sandbox %s", ErrTerminated, b.id)
	}
	if !ended(sb) {
		if err := sb.Resume(ctx); err != nil {
			return Info{}, err
		}
		return h.Info(ctx)
	}
	snap, err := l.latestSnapshot(b.id)
	if err != nil {
		return Info{}, err
	}
	// An init that died leaves a cgroup, cow layers, a proxy: release
	// them first (a no-op for a sandbox already terminated).
	if err := sb.Terminate(ctx); err != nil {
		l.log.Debug("cleaning up an ended sandbox", "id", b.id, "err", err)
	}
	nsb, err := Fork(ctx, snap, l.opts.Provision)
	if err != nil {
		return Info{}, fmt.Errorf("resuming %s from snapshot %s: %w", b.id, snap.ID, err)
	}
	l.mu.Lock()
	if b.gone || l.closed {
		l.mu.Unlock()
		_ = nsb.Terminate(context.Background())
		return Info{}, fmt.Errorf("%w: sandbox %s was terminated while resuming", ErrTerminated, b.id)
	}
	b.sb, b.created = nsb, time.Now()
	s := b.info()
	l.mu.Unlock()
	l.log.Debug("sandbox resumed from snapshot", "id", b.id, "snapshot", snap.ID)
	return s, nil
}
