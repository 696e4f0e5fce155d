package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

// snapshotDir returns the snapshot directory, creating the temporary
// one when create is set; ok is false when there is none yet.
func (l *Local) snapshotDir(create bool) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", false, ErrClosed
	}
	if l.snaps == "" {
		if !create {
			return "", false, nil
		}
		dir, err := os.MkdirTemp("", "tent-local-")
		if err != nil {
			return "", false, fmt.Errorf("failed to create the snapshot directory: %w", err)
		}
		l.snaps, l.temp = dir, true
	}
	return l.snaps, true, nil
}

// Snapshot saves the sandbox's writable layers into the snapshot store
// (see [Sandbox.Snapshot]); the snapshot records the sandbox's id, which
// Resume looks for.
func (l *Local) Snapshot(ctx context.Context, id string) (*Snapshot, error) {
	l.mu.Lock()
	b, err := l.lookup(id)
	var sb *Sandbox
	if err == nil {
		sb = b.sb
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	dir, _, err := l.snapshotDir(true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the snapshot directory: %w", err)
	}
	return sb.Snapshot(ctx, dir, SnapshotOptions{SandboxID: b.id})
}

// Resume thaws a suspended sandbox (a running one is left as it is). A
// sandbox that has ended (StateStopped: its Limits.Timeout ran out, or
// its init died) is cleaned up and provisioned again, under the same id,
// from the latest snapshot taken of it (see [Fork]); without one it
// fails with ErrTerminated.
func (l *Local) Resume(ctx context.Context, id string) (Info, error) {
	l.mu.Lock()
	b, err := l.lookup(id)
	l.mu.Unlock()
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
		return l.Get(ctx, b.id)
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

// latestSnapshot finds and verifies the newest snapshot of sandbox id.
func (l *Local) latestSnapshot(id string) (*Snapshot, error) {
	dir, ok, err := l.snapshotDir(false)
	if err != nil {
		return nil, err
	}
	var latest *Snapshot
	if ok {
		snaps, err := ListSnapshots(dir)
		if err != nil {
			return nil, err
		}
		for _, s := range snaps {
			if s.SandboxID == id {
				latest = s
			}
		}
	}
	if latest == nil {
		return nil, fmt.Errorf("%w: sandbox %s has ended and has no snapshot to resume from", ErrTerminated, id)
	}
	return LoadSnapshot(latest.Dir)
}

// Fork provisions a new sandbox from the snapshot named by snapshotID
// (an id or a unique prefix) in the snapshot store, its checksums
// verified first (ErrSnapshotCorrupt), with overrides applied.
func (l *Local) Fork(ctx context.Context, snapshotID string, overrides ForkOverrides) (Info, error) {
	dir, ok, err := l.snapshotDir(false)
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, ref.NotFound(fmt.Sprintf("no snapshot %q (none taken yet)", snapshotID))
	}
	snap, err := FindSnapshot(dir, snapshotID)
	if err != nil {
		return Info{}, err
	}
	forked := *snap
	forked.Spec = overrides.Apply(snap.Spec)
	sb, err := Fork(ctx, &forked, l.opts.Provision)
	if err != nil {
		return Info{}, err
	}
	return l.add(sb)
}
