package sandbox

import (
	"context"
	"fmt"
	"os"

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
	if err := refuseService(forked.Spec); err != nil {
		return Info{}, err
	}
	sb, err := Fork(ctx, &forked, l.opts.Provision)
	if err != nil {
		return Info{}, err
	}
	return l.add(sb)
}
