package manager

import (
	"context"
	"time"
)

// reapLoop runs reap every m.interval until Close.
func (m *Manager) reapLoop() {
	defer m.loops.Done()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C:
			m.reap(now)
		}
	}
}

// expiry says why box has outlived its timeout at now ("" when it has
// not): suspended, detached (no client attached) or idle. A sandbox
// running an exec through the manager never expires. m.mu is held.
func (m *Manager) expiry(box *managedBox, now time.Time) string {
	switch {
	case box.ending || box.running > 0:
		return ""
	case !box.suspendedAt.IsZero():
		if now.Sub(box.suspendedAt) > m.timeouts.Suspended {
			return "suspended"
		}
	case attached(box) == 0:
		since := box.lastActive
		if box.detachedAt.After(since) {
			since = box.detachedAt
		}
		if now.Sub(since) > m.timeouts.Detached {
			return "detached"
		}
	default:
		if now.Sub(box.lastActive) > m.timeouts.Idle {
			return "idle"
		}
	}
	return ""
}

// reap terminates the sandboxes whose timeout ran out at now and counts
// them in Stats.TimeoutKills.
func (m *Manager) reap(now time.Time) {
	type victim struct {
		box *managedBox
		why string
	}
	var victims []victim
	m.mu.Lock()
	for _, box := range m.boxes {
		if why := m.expiry(box, now); why != "" && m.startEnding(box) {
			victims = append(victims, victim{box, why})
		}
	}
	m.mu.Unlock()
	for _, v := range victims {
		// Not m.ctx: a Close meanwhile must not cut the teardown short.
		err := m.finishEnding(context.Background(), v.box, "timeout")
		m.mu.Lock()
		m.stats.TimeoutKills++
		m.mu.Unlock()
		m.log.Info("sandbox expired", "sandbox", v.box.id, "backend", v.box.backend.Name(), "state", v.why, "err", err)
	}
}
