package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// The warm pool keeps sandboxes of the specs in Options.Pool
// provisioned ahead of Acquire, keyed by the spec's JSON encoding (equal
// specs share warm sandboxes). One goroutine refills it, one sandbox at a
// time, whenever Acquire takes from it; a failing refill is retried with
// a backoff (100 ms doubling up to 30 s) and reported by Health. A warm
// sandbox is handed out at most once: Release terminates it rather than
// returning a used sandbox to the pool. A spec's Limits.Timeout runs from
// provisioning, in the pool too.

// warmPool is the Manager's warm pool; guarded by Manager.mu, except
// wake, which is set once by init.
type warmPool struct {
	slots   []*warmSlot
	byKey   map[string]*warmSlot
	wake    chan struct{} // cap 1: the refill has work
	changed chan struct{} // closed and replaced on every change
}

type warmSlot struct {
	index   int
	spec    sandbox.Spec
	size    int
	backend sandbox.Backend
	ready   []warmBox
	lastErr error // the last refill's failure, nil after a success
}

type warmBox struct {
	backend sandbox.Backend
	h       sandbox.Handle
	info    sandbox.Info
}

// specKey is the pool's key for spec.
func specKey(spec sandbox.Spec) string {
	b, err := json.Marshal(spec)
	if err != nil {
		return "" // not a pooled spec
	}
	return string(b)
}

func (p *warmPool) init(specs []WarmSpec, backends []sandbox.Backend) error {
	p.byKey = map[string]*warmSlot{}
	p.wake = make(chan struct{}, 1)
	p.changed = make(chan struct{})
	for i, w := range specs {
		field := fmt.Sprintf("Options.Pool[%d]", i)
		if w.Size < 1 {
			return fmt.Errorf("%w: %s.Size: %d: want at least 1", sandbox.ErrInvalidOptions, field, w.Size)
		}
		b, err := w.Selection.choose(backends, field)
		if err != nil {
			return err
		}
		key := specKey(w.Spec)
		if key == "" {
			return fmt.Errorf("%w: %s.Spec cannot be encoded as a pool key", sandbox.ErrInvalidOptions, field)
		}
		if prev, dup := p.byKey[key]; dup {
			return fmt.Errorf("%w: %s.Spec: the same spec as Pool[%d]; raise its Size instead", sandbox.ErrInvalidOptions, field, prev.index)
		}
		s := &warmSlot{index: i, spec: w.Spec, size: w.Size, backend: b}
		p.slots = append(p.slots, s)
		p.byKey[key] = s
	}
	p.kick()
	return nil
}

// kick wakes the refill; it needs no lock.
func (p *warmPool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// notify wakes WaitPool.
func (p *warmPool) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// ready counts the warm sandboxes.
func (p *warmPool) ready() int {
	n := 0
	for _, s := range p.slots {
		n += len(s.ready)
	}
	return n
}

// next returns the slot furthest below its size, nil when all are full.
func (p *warmPool) next() *warmSlot {
	var best *warmSlot
	for _, s := range p.slots {
		if d := s.size - len(s.ready); d > 0 && (best == nil || d > best.size-len(best.ready)) {
			best = s
		}
	}
	return best
}

// drain empties the pool and returns what it held.
func (p *warmPool) drain() []warmBox {
	var out []warmBox
	for _, s := range p.slots {
		out = append(out, s.ready...)
		s.ready = nil
	}
	p.notify()
	return out
}

// health reports the slots that are short and whose refill fails.
func (p *warmPool) health() []error {
	var errs []error
	for _, s := range p.slots {
		if s.lastErr != nil && len(s.ready) < s.size {
			errs = append(errs, fmt.Errorf("warm pool %d: %d of %d ready, refill failing: %w", s.index, len(s.ready), s.size, s.lastErr))
		}
	}
	return errs
}

// takeWarm hands out a warm sandbox of the spec with key, when the pool
// has a live one on a backend sel accepts; the caller kicks the refill
// once it has registered the sandbox (so that the refill's provisioning
// does not compete with the hand-out). Dead ones (a spec's
// Limits.Timeout ran out in the pool) are terminated on the way.
func (m *Manager) takeWarm(ctx context.Context, key string, sel Selection) (warmBox, bool) {
	for {
		m.mu.Lock()
		slot := m.pool.byKey[key]
		if slot == nil || key == "" {
			m.mu.Unlock()
			return warmBox{}, false
		}
		if len(slot.ready) == 0 || !sel.accepts(slot.backend) {
			m.stats.PoolMisses++
			m.pool.kick()
			m.mu.Unlock()
			return warmBox{}, false
		}
		w := slot.ready[0]
		slot.ready = slot.ready[1:]
		m.pool.notify()
		m.mu.Unlock()
		s, err := w.h.Info(ctx)
		if err == nil && s.State == sandbox.StateRunning {
			m.mu.Lock()
			m.stats.PoolHits++
			m.mu.Unlock()
			w.info = s
			return w, true
		}
		m.log.Debug("warm sandbox gone", "sandbox", w.info.ID, "state", s.State, "err", err)
		m.pool.kick()
		_ = w.h.Terminate(context.WithoutCancel(ctx))
	}
}

// WaitPool waits until every warm pool entry is full. It returns the
// refill's errors, without waiting further, when an entry is short and
// its last refill failed; [sandbox.ErrClosed] after Close.
func (m *Manager) WaitPool(ctx context.Context) error {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return sandbox.ErrClosed
		}
		full := m.pool.next() == nil
		errs := m.pool.health()
		ch := m.pool.changed
		m.mu.Unlock()
		switch {
		case full:
			return nil
		case len(errs) > 0:
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// refillLoop keeps the pool full until Close.
func (m *Manager) refillLoop() {
	defer m.loops.Done()
	var backoff time.Duration
	for {
		var retry <-chan time.Time
		var timer *time.Timer
		if m.refill() {
			backoff = min(max(2*backoff, 100*time.Millisecond), 30*time.Second)
			timer = time.NewTimer(backoff)
			retry = timer.C
		} else {
			backoff = 0
		}
		select {
		case <-m.ctx.Done():
		case <-m.pool.wake:
		case <-retry:
		}
		if timer != nil {
			timer.Stop()
		}
		if m.ctx.Err() != nil {
			return
		}
	}
}

// refill provisions, one at a time, until every slot is full; it
// returns true when a provisioning failed.
func (m *Manager) refill() (failed bool) {
	for {
		m.mu.Lock()
		slot := m.pool.next()
		if m.closed || slot == nil {
			m.mu.Unlock()
			return false
		}
		m.mu.Unlock()
		start := time.Now()
		s, h, err := provision(m.ctx, slot.backend, slot.spec)
		d := time.Since(start)
		m.mu.Lock()
		if err != nil {
			stopping := m.ctx.Err() != nil
			if !stopping {
				slot.lastErr = err
				m.pool.notify()
			}
			m.mu.Unlock()
			if !stopping {
				m.log.Warn("warm pool refill failed", "pool", slot.index, "backend", slot.backend.Name(), "err", err)
			}
			return !stopping
		}
		m.recordProvision(d)
		if m.closed {
			m.mu.Unlock()
			_ = h.Terminate(context.Background())
			return false
		}
		slot.ready = append(slot.ready, warmBox{slot.backend, h, s})
		slot.lastErr = nil
		m.pool.notify()
		m.mu.Unlock()
		m.log.Debug("warm sandbox ready", "pool", slot.index, "sandbox", s.ID, "elapsed", d)
	}
}
