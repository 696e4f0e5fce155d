package supervised

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// Backend is the [sandbox.Backend] of durable, daemonless sandboxes: each
// runs under a supervisor process of its own (this program, re-executed
// from /proc/self/exe: the program must call sandbox.Init first), which
// outlives the caller; the state directory holds one record per sandbox
// (ID.json), its control socket (ID.sock) and log (ID.log), and the
// snapshots. Every process that opens the same state directory sees the
// same sandboxes: the tent CLI, `tent serve`, an embedding program. A
// sandbox whose supervisor died (killed, a host restart) reads as
// stopped until Resume (from its latest snapshot) or Terminate.
type Backend struct {
	st   stateDir
	opts Options
	log  *slog.Logger

	capsOnce sync.Once
	caps     sandbox.Capabilities
}

// Open returns the backend of the state directory dir ("" means
// [DefaultStateDir]); dir is created (0700) when first needed and must be
// the caller's own (sandbox.ErrUnsafeStateDir otherwise).
func Open(dir string, opts Options) (*Backend, error) {
	if dir == "" {
		dir = DefaultStateDir()
	}
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		dir = abs
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{st: stateDir{Dir: dir}, opts: opts, log: log}, nil
}

// Dir is the state directory.
func (b *Backend) Dir() string { return b.st.Dir }

// Name returns [Name].
func (b *Backend) Name() string { return Name }

// Capabilities reports what sandboxes on this host get, probed at the
// first call (as sandbox.NewLocal probes).
func (b *Backend) Capabilities() sandbox.Capabilities {
	b.capsOnce.Do(func() {
		if l, err := sandbox.NewLocal(sandbox.LocalOptions{}); err == nil {
			b.caps = l.Capabilities()
			_ = l.Close(context.Background())
		}
	})
	return b.caps
}

// Provision starts a supervisor that provisions spec, and returns once the
// sandbox is served (or refused: nothing is left behind then). A
// Spec.Name must be free in the state directory.
//
// The spec's secrets (netpolicy.Secret) are names: their values are in
// the state directory's secret store ([Backend.Secrets]), which the
// sandbox's proxy asks each time a request goes out. Values given inline
// (Secret.Value) are written to the store here, before the launch, and
// never reach the supervisor, the record or a snapshot. A sandbox with
// secrets or HTTP rules never idles (its proxy holds the CA's key).
func (b *Backend) Provision(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	id := newID()
	var err error
	if spec.Network.Secrets, err = b.storeInline(id, spec.Network.Secrets); err != nil {
		return sandbox.Info{}, err
	}
	return b.spawn(ctx, launch{ID: id, Spec: spec})
}

// Secrets is the state directory's secret store: the values of the
// secrets that the network policies of its sandboxes name. A write is in
// force from the next request of every sandbox that names the secret
// (running, forked, resumed), whichever supervisor serves it.
func (b *Backend) Secrets() *secretstore.Store { return secretstore.Open(b.st.Dir) }

// storeInline writes the values given inline among secrets to the store,
// and returns secrets without them. A variable's value is shared by name
// (every sandbox naming it sends it); a header transform's is sandbox
// id's alone (E2B's rules: each sandbox has its own, under names all of
// them use), in the sandbox's scope (see package secretstore).
func (b *Backend) storeInline(id string, secrets []netpolicy.Secret) ([]netpolicy.Secret, error) {
	out := slices.Clone(secrets)
	for i, s := range out {
		if s.Value == "" {
			continue
		}
		name := s.Name
		if s.Header != "" {
			name = secretstore.ScopedName(id, s.Name)
		}
		if err := b.Secrets().Set(name, s.Value); err != nil {
			return nil, fmt.Errorf("%w: network: %w", sandbox.ErrInvalidSpec, err)
		}
		out[i].Value = ""
	}
	return out, nil
}

// intercepts reports whether spec's proxy terminates TLS (secrets or
// HTTP rules).
func intercepts(spec sandbox.Spec) bool {
	c, err := netpolicy.Compile(spec.Network)
	return err == nil && c.NeedsInterception()
}

// Fork starts a new sandbox from the snapshot ref names (an id or a
// unique prefix) in the state directory's snapshots, with overrides.
func (b *Backend) Fork(ctx context.Context, ref string, o sandbox.ForkOverrides) (sandbox.Info, error) {
	snap, err := sandbox.FindSnapshot(b.st.SnapshotsDir(), ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	id := newID()
	// The fork names the secrets its snapshot's sandbox named: the values
	// given for that sandbox alone are the fork's too.
	if err := b.Secrets().CopyScope(snap.SandboxID, id); err != nil {
		return sandbox.Info{}, err
	}
	if o.Network != nil {
		n := *o.Network
		if n.Secrets, err = b.storeInline(id, n.Secrets); err != nil {
			return sandbox.Info{}, err
		}
		o.Network = &n
	}
	fo := forkOverrides(o)
	return b.spawn(ctx, launch{ID: id, Spec: o.Apply(snap.Spec), FromSnapshot: snap.Dir, Overrides: &fo})
}

// Sweep removes the files that sandboxes without a record left in the
// state directory: the log (and socket, temporaries) of a create or fork
// killed before its sandbox was saved. A create in progress, and any
// live supervisor, holds a lock on its sandbox's log and is never
// touched. Provision and Fork sweep as they start; tent rm --all too.
// Records, broken or not, are not touched (Terminate removes them).
func (b *Backend) Sweep(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.st.sweep()
}

// Snapshots lists the state directory's snapshots, oldest first.
func (b *Backend) Snapshots(ctx context.Context) ([]*sandbox.Snapshot, error) {
	if err := b.st.checkDir(); err != nil {
		return nil, err
	}
	return sandbox.ListSnapshots(b.st.SnapshotsDir())
}

// List returns every sandbox of the state directory whose record can be
// read, oldest first. A broken record (see [RecordError]) is left out,
// not an error: one bad record does not hide the others. [Backend.ListAll]
// returns the broken ones too.
func (b *Backend) List(ctx context.Context) ([]sandbox.Info, error) {
	all, _, err := b.ListAll(ctx)
	return all, err
}

// ListAll is List, and the records that cannot be read beside it, by id:
// one [*RecordError] each (the id, the file and what is wrong with it).
// The error is for the state directory itself (unsafe, unreadable).
func (b *Backend) ListAll(ctx context.Context) ([]sandbox.Info, []*RecordError, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	recs, broken, err := b.st.List()
	if err != nil {
		return nil, nil, err
	}
	out := make([]sandbox.Info, len(recs))
	for i, r := range recs {
		out[i] = b.info(r)
	}
	return out, broken, nil
}

// info describes rec.
func (b *Backend) info(rec *record) sandbox.Info {
	spec := rec.Spec
	spec.Name, spec.Labels = rec.Name, rec.Labels
	return sandbox.Info{ID: rec.ID, Backend: Name, State: rec.State, Created: rec.Created, Spec: spec,
		SupervisorPID: rec.Supervisor, InitPID: rec.InitPID, CgroupPaths: rec.Cgroups, Protections: rec.Protections, Layers: rec.Layers, Ended: rec.Ended, Reason: rec.Reason}
}

var _ sandbox.Backend = (*Backend)(nil)

// SnapshotsDir is the directory of the state directory's snapshots.
func (b *Backend) SnapshotsDir() string { return b.st.SnapshotsDir() }
