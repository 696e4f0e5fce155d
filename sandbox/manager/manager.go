package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// Defaults of [Options].
const (
	// DefaultIdleTimeout: a sandbox with an attached client but no
	// activity for this long is terminated.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultDetachedTimeout: a sandbox whose clients have all detached
	// is terminated after this long.
	DefaultDetachedTimeout = time.Hour
	// DefaultSuspendedTimeout: a suspended sandbox is terminated after
	// this long.
	DefaultSuspendedTimeout = 24 * time.Hour
	// DefaultReapInterval is how often the reaper looks for expired
	// sandboxes.
	DefaultReapInterval = 10 * time.Second
)

// NoTimeout, as a [Timeouts] field, keeps sandboxes in that state until
// they are released or terminated.
const NoTimeout time.Duration = math.MaxInt64

// Timeouts bound how long a [Manager] keeps a sandbox nobody uses. A zero
// field means its default; a negative one is refused.
type Timeouts struct {
	// Idle applies while at least one client is attached: the time since
	// the sandbox's last activity through the manager (Acquire, Join,
	// Exec, Touch, Lookup, Resume). A running Exec is never idle.
	// Default DefaultIdleTimeout.
	Idle time.Duration
	// Detached applies once every client has detached, counted from the
	// later of the last activity and the last detach. Default
	// DefaultDetachedTimeout.
	Detached time.Duration
	// Suspended applies while the sandbox is suspended, counted from the
	// suspend. Default DefaultSuspendedTimeout.
	Suspended time.Duration
}

// WarmSpec is one entry of the warm pool: Size sandboxes of Spec, on the
// backend Selection chooses, provisioned ahead of Acquire.
type WarmSpec struct {
	// Spec is what to keep warm; Acquire of an equal spec takes one.
	Spec sandbox.Spec
	// Size is how many to keep ready (at least 1).
	Size int
	// Selection chooses the backend that keeps them.
	Selection
}

// Options configure a [Manager].
type Options struct {
	// Backends run the sandboxes, in order of preference; at least one,
	// with distinct names. The manager does not close them.
	Backends []sandbox.Backend
	// Logger receives the manager's logs (expired sandboxes at Info,
	// the rest at Debug); nil discards them.
	Logger *slog.Logger
	// Timeouts bound unused sandboxes (see [Timeouts]).
	Timeouts Timeouts
	// ReapInterval is how often the reaper looks for expired sandboxes;
	// 0 means DefaultReapInterval. A sandbox outlives its timeout by at
	// most this much.
	ReapInterval time.Duration
	// Pool lists the specs to keep warm; none by default.
	Pool []WarmSpec
}

// Manager hands out sandboxes to clients, in the spirit of an agent
// platform's sandbox service: it picks a backend by required
// capabilities, takes sandboxes from a warm pool when one matches the
// spec, tracks each client's lease (labels, attached or detached),
// keeps a default sandbox, terminates sandboxes nobody uses (see
// [Timeouts]), and keeps statistics. It owns the sandboxes it provisions:
// Close terminates them all and stops its goroutines. Its methods are
// safe for concurrent use.
//
// Leases name the client's view (Exec, Touch, Detach, Release,
// Suspend, Resume, Lookup take a lease id); sandboxes are named by
// their backend id or a unique prefix (Join, Terminate, SetDefault).
// Lifecycle changes meant to count for the timeouts go through the
// manager, not straight to the backend.
type Manager struct {
	backends []sandbox.Backend
	log      *slog.Logger
	timeouts Timeouts
	interval time.Duration

	ctx    context.Context // cancelled by Close: stops the goroutines
	cancel context.CancelFunc
	loops  sync.WaitGroup // reaper and pool refill
	busy   sync.WaitGroup // operations that create or destroy sandboxes

	mu       sync.Mutex
	closed   bool
	boxes    map[string]*managedBox
	leases   map[string]*lease
	def      string // the default sandbox's id
	pool     warmPool
	stats    Stats
	provTime time.Duration // sum over stats.Created
}

// managedBox is a sandbox the manager handed out; guarded by Manager.mu.
type managedBox struct {
	id          string
	backend     sandbox.Backend
	h           sandbox.Handle
	pooled      bool
	created     time.Time
	lastActive  time.Time
	detachedAt  time.Time // when the last attached lease left
	suspendedAt time.Time // zero unless suspended
	running     int       // execs in flight
	ending      bool      // being terminated
	leases      map[string]*lease
}

// lease is one client's hold on a managedBox; guarded by Manager.mu.
type lease struct {
	id, client string
	labels     map[string]string
	detached   bool
	created    time.Time
	box        *managedBox
}

// New checks opts and starts the manager's reaper and, with a
// pool, its refill; the pool fills in the background (see WaitPool).
func New(opts Options) (*Manager, error) {
	t, interval, err := opts.validate()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		backends: append([]sandbox.Backend(nil), opts.Backends...),
		log:      log,
		timeouts: t,
		interval: interval,
		boxes:    map[string]*managedBox{},
		leases:   map[string]*lease{},
	}
	if err := m.pool.init(opts.Pool, m.backends); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.loops.Add(1)
	go m.reapLoop()
	if len(m.pool.slots) > 0 {
		m.loops.Add(1)
		go m.refillLoop()
	}
	return m, nil
}

// validate checks opts and returns the timeouts and interval with their
// defaults filled in.
func (opts Options) validate() (Timeouts, time.Duration, error) {
	if len(opts.Backends) == 0 {
		return Timeouts{}, 0, fmt.Errorf("%w: Options.Backends: at least one backend is needed (for example sandbox.NewLocal)", sandbox.ErrInvalidOptions)
	}
	names := map[string]int{}
	for i, b := range opts.Backends {
		if b == nil {
			return Timeouts{}, 0, fmt.Errorf("%w: Options.Backends[%d] is nil", sandbox.ErrInvalidOptions, i)
		}
		if j, dup := names[b.Name()]; dup {
			return Timeouts{}, 0, fmt.Errorf("%w: Options.Backends[%d]: the name %q is already used by Backends[%d]", sandbox.ErrInvalidOptions, i, b.Name(), j)
		}
		names[b.Name()] = i
	}
	t := opts.Timeouts
	for _, f := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"Idle", &t.Idle, DefaultIdleTimeout},
		{"Detached", &t.Detached, DefaultDetachedTimeout},
		{"Suspended", &t.Suspended, DefaultSuspendedTimeout},
	} {
		switch {
		case *f.d < 0:
			return Timeouts{}, 0, fmt.Errorf("%w: Options.Timeouts.%s: %s is negative (0 means the default, %s; NoTimeout disables it)", sandbox.ErrInvalidOptions, f.name, *f.d, f.def)
		case *f.d == 0:
			*f.d = f.def
		}
	}
	interval := opts.ReapInterval
	switch {
	case interval < 0:
		return Timeouts{}, 0, fmt.Errorf("%w: Options.ReapInterval: %s is negative (0 means the default, %s)", sandbox.ErrInvalidOptions, interval, DefaultReapInterval)
	case interval == 0:
		interval = DefaultReapInterval
	}
	return t, interval, nil
}

// begin registers an operation that may create or destroy sandboxes, so
// that Close waits for it; it fails once the manager is closed. m.mu is
// held.
func (m *Manager) begin() error {
	if m.closed {
		return sandbox.ErrClosed
	}
	m.busy.Add(1)
	return nil
}

// Stats are a [Manager]'s counters and gauges.
type Stats struct {
	// Created counts the sandboxes provisioned (pool refills included).
	Created uint64 `json:"created"`
	// Active is the number of sandboxes handed out and not yet ended.
	Active int `json:"active"`
	// Attached and Detached count leases by state (a lease of a
	// suspended sandbox counts by whether its client detached).
	Attached int `json:"attached_leases"`
	Detached int `json:"detached_leases"`
	// Pooled is the number of warm sandboxes ready.
	Pooled int `json:"pooled"`
	// PoolHits counts acquires served from the pool; PoolMisses those
	// of a pooled spec that found it empty.
	PoolHits   uint64 `json:"pool_hits"`
	PoolMisses uint64 `json:"pool_misses"`
	// AvgProvision is the mean time a backend took to provision.
	AvgProvision time.Duration `json:"avg_provision_ns"`
	// TimeoutKills counts sandboxes the reaper terminated.
	TimeoutKills uint64 `json:"timeout_kills"`
}

// PoolHitRate is PoolHits over the acquires of pooled specs (0 without
// any).
func (s Stats) PoolHitRate() float64 {
	if n := s.PoolHits + s.PoolMisses; n > 0 {
		return float64(s.PoolHits) / float64(n)
	}
	return 0
}

// Stats returns the current statistics.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Active = len(m.boxes)
	for _, l := range m.leases {
		if l.detached {
			s.Detached++
		} else {
			s.Attached++
		}
	}
	s.Pooled = m.pool.ready()
	if s.Created > 0 {
		s.AvgProvision = m.provTime / time.Duration(s.Created)
	}
	return s
}

// recordProvision counts one provisioning that took d; m.mu is held.
func (m *Manager) recordProvision(d time.Duration) {
	m.stats.Created++
	m.provTime += d
}

// Health reports what keeps the manager from serving, joined:
// [sandbox.ErrClosed] after Close; each backend's own health, for
// backends with a Health(context.Context) error method (as
// [sandbox.Local] has); a warm pool whose last refill failed. Nil means
// healthy.
func (m *Manager) Health(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return sandbox.ErrClosed
	}
	errs := m.pool.health()
	m.mu.Unlock()
	for _, b := range m.backends {
		if h, ok := b.(interface{ Health(context.Context) error }); ok {
			if err := h.Health(ctx); err != nil {
				errs = append(errs, fmt.Errorf("backend %s: %w", b.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close stops the reaper and the pool refill, waits for operations in
// flight, and terminates every sandbox the manager owns (handed out or
// warm). Backends stay open. Later calls fail with [sandbox.ErrClosed];
// Close itself is idempotent. When ctx ends first, Close returns its
// error and the termination goes on in the background.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	type victim struct {
		h  sandbox.Handle
		id string
	}
	var victims []victim
	for _, box := range m.boxes {
		if !box.ending {
			box.ending = true
			victims = append(victims, victim{box.h, box.id})
		}
	}
	for _, w := range m.pool.drain() {
		victims = append(victims, victim{w.h, w.info.ID})
	}
	clear(m.boxes)
	clear(m.leases)
	m.def = ""
	m.mu.Unlock()

	m.cancel()
	var errs []error
	for _, v := range victims {
		if err := v.h.Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			errs = append(errs, fmt.Errorf("terminating %s: %w", v.id, err))
		}
	}
	done := make(chan struct{})
	go func() {
		m.loops.Wait()
		m.busy.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("closing the manager: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}
