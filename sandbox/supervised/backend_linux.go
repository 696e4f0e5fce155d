package supervised

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
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
// The values of the spec's secrets (netpolicy.Secret) travel to the
// supervisor with the rest of the launch, through a pipe, and stay in its
// memory: the sandbox's record (and so tent inspect, tent ls) and its
// snapshots keep the secrets' names and hosts only. A sandbox with
// secrets or HTTP rules never idles (its proxy holds the CA's key and the
// values), and cannot be brought back from its record or a snapshot
// without the values given again.
func (b *Backend) Provision(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	return b.spawn(ctx, launch{ID: newID(), Spec: spec, SecretValues: secretValues(spec.Network)})
}

// secretValues returns the values of p's secrets by name, nil without.
func secretValues(p sandbox.NetworkPolicy) map[string]string {
	if len(p.Secrets) == 0 {
		return nil
	}
	m := make(map[string]string, len(p.Secrets))
	for _, s := range p.Secrets {
		m[s.Name] = s.Value
	}
	return m
}

// fillSecretValues gives p's secrets their values from m.
func fillSecretValues(p *sandbox.NetworkPolicy, m map[string]string) {
	for i := range p.Secrets {
		if v, ok := m[p.Secrets[i].Name]; ok {
			p.Secrets[i].Value = v
		}
	}
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
	fo := forkOverrides(o)
	var values map[string]string
	if o.Network != nil {
		values = secretValues(*o.Network)
	}
	return b.spawn(ctx, launch{ID: newID(), Spec: o.Apply(snap.Spec), FromSnapshot: snap.Dir, Overrides: &fo, SecretValues: values})
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
