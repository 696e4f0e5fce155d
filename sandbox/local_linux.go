package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

// Local is the [Backend] that runs sandboxes on this host, in this
// process: each is a [*Sandbox] (see [Provision]), kept in memory under
// a random id ([NewID]). It holds no state on disk besides snapshots;
// its sandboxes die with the process that owns them. Use [NewLocal].
type Local struct {
	opts LocalOptions
	log  *slog.Logger
	caps Capabilities

	mu     sync.Mutex
	closed bool
	boxes  map[string]*localBox
	snaps  string // "" until the first snapshot when temporary
	temp   bool   // snaps is ours, removed by Close
}

// localBox is one sandbox of a Local across its incarnations (Resume
// from a snapshot replaces sb under the same id).
type localBox struct {
	id       string
	sb       *Sandbox  // guarded by Local.mu
	created  time.Time // guarded by Local.mu
	gone     bool      // terminated; guarded by Local.mu
	reviving sync.Mutex
}

// NewLocal returns a Local backend. It probes this host's capabilities
// once (Landlock ABI, whether a sandbox cgroup can be created and of
// which version), as `tent doctor` does, creating and removing an empty
// probe cgroup.
func NewLocal(opts LocalOptions) (*Local, error) {
	if d := opts.SnapshotDir; d != "" && !filepath.IsAbs(d) {
		return nil, fmt.Errorf("%w: LocalOptions.SnapshotDir: %q is not an absolute path", ErrInvalidOptions, d)
	}
	log := opts.Provision.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Local{opts: opts, log: log, caps: probeCapabilities(), boxes: map[string]*localBox{}, snaps: opts.SnapshotDir}
	log.Debug("local backend", "capabilities", l.caps)
	return l, nil
}

// probeCapabilities reports what sandboxes on this host get. Landlock is
// the running kernel's ABI capped at fs.MaxLandlockABI; the cgroup is
// probed with cgroups.CanCreate (the doctor's check), from the top of the
// hierarchy for root as provisioning does when root's own cgroup holds
// other processes. Suspend needs the cgroup's freezer (cgroup.freeze on
// v2, the freezer controller on v1).
func probeCapabilities() Capabilities {
	c := Capabilities{Snapshot: true, Resume: true, NetworkPolicy: true, CgroupVersion: cgroups.None.String()}
	if abi, err := fs.LandlockABI(); err == nil && abi > 0 {
		c.LandlockABI = min(abi, fs.MaxLandlockABI)
	}
	host, err := cgroupHost()
	if err != nil {
		return c
	}
	v, err := cgroups.CanCreateFor(host)
	if err == nil {
		c.CgroupVersion = v.String()
		c.Suspend = v == cgroups.V2 || host.V1Mounts["freezer"] != ""
	}
	return c
}

// Name returns "local".
func (l *Local) Name() string { return localName }

// Capabilities reports what was probed when l was created.
func (l *Local) Capabilities() Capabilities { return l.caps }

// Provision starts a sandbox (see [Provision]).
func (l *Local) Provision(ctx context.Context, spec Spec) (Info, error) {
	if err := l.checkOpen(); err != nil {
		return Info{}, err
	}
	if err := refuseService(spec); err != nil {
		return Info{}, err
	}
	sb, err := Provision(ctx, spec, l.opts.Provision)
	if err != nil {
		return Info{}, err
	}
	return l.add(sb)
}

// refuseService fails closed on a spec with a [Service]: Local has no
// supervisor to start it in every incarnation and keep it running.
func refuseService(spec Spec) error {
	if spec.Service == nil {
		return nil
	}
	return fmt.Errorf("%w: the local backend does not run a sandbox's service (spec.service): use package supervised (tent's default backend)", ErrUnsupported)
}

// add registers a new sandbox under a fresh id.
func (l *Local) add(sb *Sandbox) (Info, error) {
	box := &localBox{id: randomID(), sb: sb, created: time.Now()}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = sb.Terminate(context.Background())
		return Info{}, ErrClosed
	}
	l.boxes[box.id] = box
	s := box.info()
	l.mu.Unlock()
	l.log.Debug("sandbox provisioned", "id", box.id, "init_pid", s.InitPID)
	return s, nil
}

// ended reports whether sb has ended: terminated (its Limits.Timeout) or
// its init died (killed, out of memory). A dead init stays a zombie until
// Terminate reaps it, so its pid is not reused meanwhile.
func ended(sb *Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
	}
	return !namespaces.ProcessRuns(sb.run.init.Pid())
}

// info describes box; l.mu is held.
func (b *localBox) info() Info {
	i := b.sb.Info()
	i.ID, i.Created = b.id, b.created
	return i
}

func (l *Local) checkOpen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return nil
}

// lookup resolves ref (an id or a unique prefix); l.mu is held.
func (l *Local) lookup(boxRef string) (*localBox, error) {
	if l.closed {
		return nil, ErrClosed
	}
	if b, ok := l.boxes[boxRef]; ok {
		return b, nil
	}
	ids := make([]string, 0, len(l.boxes))
	for id := range l.boxes {
		ids = append(ids, id)
	}
	id, err := ref.Resolve(boxRef, ids, "sandbox")
	if err != nil {
		return nil, err
	}
	return l.boxes[id], nil
}

// sandbox returns the [*Sandbox] behind id (its current incarnation).
func (l *Local) sandbox(id string) (*Sandbox, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := l.lookup(id)
	if err != nil {
		return nil, err
	}
	return b.sb, nil
}

// List returns every sandbox, oldest first.
func (l *Local) List(ctx context.Context) ([]Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	out := make([]Info, 0, len(l.boxes))
	for _, b := range l.boxes {
		out = append(out, b.info())
	}
	slices.SortFunc(out, func(a, b Info) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Open returns a handle on the sandbox named by ref (an id or a unique
// prefix of one).
func (l *Local) Open(ctx context.Context, ref string) (Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := l.lookup(ref)
	if err != nil {
		return nil, err
	}
	return &localHandle{l: l, id: b.id}, nil
}

// Health reports whether l can serve: ErrClosed after Close, and an
// error when the snapshot store's directory is not writable.
func (l *Local) Health(ctx context.Context) error {
	dir, ok, err := l.snapshotDir(false)
	if err != nil || !ok {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Dir(dir) // where it will be made
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("snapshot store: %w", &os.PathError{Op: "access", Path: dir, Err: err})
	}
	return nil
}

// Close terminates every sandbox and, when the snapshot store is
// temporary, removes it with its snapshots. Later calls fail with
// ErrClosed; Close itself is idempotent.
func (l *Local) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var sbs []*Sandbox
	for _, b := range l.boxes {
		b.gone = true
		sbs = append(sbs, b.sb)
	}
	clear(l.boxes)
	temp, dir := l.temp, l.snaps
	l.mu.Unlock()
	var errs []error
	for _, sb := range sbs {
		errs = append(errs, sb.Terminate(ctx))
	}
	if temp {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

var _ Backend = (*Local)(nil)
