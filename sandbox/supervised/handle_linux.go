package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// Sandbox is a handle on one sandbox of a [Backend] (see
// [Backend.Open]): the [sandbox.Handle] verbs, and the supervisor's own
// (detached commands, ports, snapshots with options). It holds the id
// alone; each call reads the sandbox's record and talks to its current
// supervisor, so a handle outlives idle hand-offs and resumes.
type Sandbox struct {
	b  *Backend
	id string
}

var _ sandbox.Handle = (*Sandbox)(nil)

// Open returns a handle on the sandbox ref names: an exact id, an exact
// name or a unique id prefix (sandbox.ErrAmbiguous when several match).
func (b *Backend) Open(ctx context.Context, ref string) (sandbox.Handle, error) {
	return b.Sandbox(ctx, ref)
}

// Sandbox is Open with the concrete handle. For an id it reads only the
// head of the record (see recordHead), all that the calls that reach the
// supervisor (Exec, File, Dial, the process verbs...) read; a name or a
// prefix is resolved from the whole records. The exact id of a broken
// record (see [RecordError]) gives a handle too, whose Terminate removes
// it and whose other verbs fail with the *RecordError.
func (b *Backend) Sandbox(ctx context.Context, ref string) (*Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if validID(ref) {
		r, err := b.st.head(ref)
		if err == nil {
			return &Sandbox{b: b, id: r.ID}, nil
		}
		if errors.As(err, new(*RecordError)) {
			// Its Terminate removes it; its other verbs fail with err.
			return &Sandbox{b: b, id: ref}, nil
		}
	}
	rec, err := b.st.Get(ref)
	if err != nil {
		return nil, err
	}
	return &Sandbox{b: b, id: rec.ID}, nil
}

// Lookup is Sandbox and its Info from the one read of its record (what
// the CLI's verbs do first).
func (b *Backend) Lookup(ctx context.Context, ref string) (*Sandbox, sandbox.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, sandbox.Info{}, err
	}
	rec, err := b.st.Get(ref)
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	return &Sandbox{b: b, id: rec.ID}, b.info(rec), nil
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// rec reads the sandbox's record (ErrNotFound once it is removed).
func (s *Sandbox) rec() (*record, error) { return s.b.st.Get(s.id) }

// dialRec is rec for the calls that only reach the supervisor: the head
// of the record (see recordHead), or rec's answer where that cannot be
// read (its errors: ErrNotFound...).
func (s *Sandbox) dialRec() (*record, error) {
	if r, err := s.b.st.head(s.id); err == nil {
		return r, nil
	}
	return s.rec()
}

// Info describes the sandbox as its record has it.
func (s *Sandbox) Info(ctx context.Context) (sandbox.Info, error) {
	rec, err := s.rec()
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.b.info(rec), nil
}

// Mount adds m to the running sandbox (see sandbox.Sandbox.Mount); its
// record keeps the new spec.
func (s *Sandbox) Mount(ctx context.Context, m sandbox.Mount) error {
	return s.simple(ctx, request{Op: opMount, Mount: &m})
}

// SetNetworkPolicy replaces a limited sandbox's rules (see
// sandbox.Cmd.SetNetworkPolicy); its record keeps them. Values given
// inline (netpolicy.Secret.Value) are written to the backend's secret
// store first, and never go to the supervisor (only header transforms
// change at run time: a variable is refused, its value not written).
func (s *Sandbox) SetNetworkPolicy(ctx context.Context, p sandbox.NetworkPolicy) error {
	if slices.ContainsFunc(p.Secrets, func(s netpolicy.Secret) bool { return s.Header == "" }) {
		return fmt.Errorf("%w: secrets that are variables are given when the sandbox starts (their placeholders are in its environment from then on); only header transforms change at run time", sandbox.ErrUnsupported)
	}
	var err error
	if p.Secrets, err = s.b.storeInline(s.id, p.Secrets); err != nil {
		return err
	}
	return s.simple(ctx, request{Op: opNet, Network: &p})
}

// SetLimits changes the running sandbox's memory, pids and CPU limits
// (see sandbox.Sandbox.SetLimits); its record keeps the new ones.
func (s *Sandbox) SetLimits(ctx context.Context, l sandbox.Limits) error {
	return s.simple(ctx, request{Op: opLimits, Limits: &l})
}

// Suspend freezes the sandbox.
func (s *Sandbox) Suspend(ctx context.Context) error {
	return s.simple(ctx, request{Op: opSuspend})
}

// Snapshot snapshots the sandbox into the state directory's snapshots.
func (s *Sandbox) Snapshot(ctx context.Context) (*sandbox.Snapshot, error) {
	return s.SnapshotWith(ctx, sandbox.SnapshotOptions{})
}

// SnapshotWith is Snapshot with options; of opts only IncludeReadWrite
// applies (the supervisor names the snapshot).
func (s *Sandbox) SnapshotWith(ctx context.Context, opts sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	rep, err := call(ctx, rec, request{Op: opSnapshot, IncludeReadWrite: opts.IncludeReadWrite}, nil)
	if err != nil {
		return nil, err
	}
	return sandbox.FindSnapshot(s.b.st.SnapshotsDir(), rep.Snapshot)
}

// Usage reads what the sandbox uses now from its cgroups, without waking
// its supervisor.
func (s *Sandbox) Usage(ctx context.Context) (sandbox.Usage, error) {
	rec, err := s.rec()
	if err != nil {
		return sandbox.Usage{}, err
	}
	return s.b.st.Usage(rec)
}

// Dial connects to port of the sandbox's loopback, inside its network
// namespace (see [sandbox.Sandbox.DialPort]): the supervisor makes the
// connection and passes its descriptor on, so that it lives on whatever
// becomes of the supervisor (an idle hand-off) until either side closes
// it or the sandbox ends.
func (s *Sandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	_, fds, err := exchange(ctx, rec, request{Op: opDial, Port: port}, nil)
	if err != nil {
		ctlmsg.Close(fds)
		return nil, err
	}
	if len(fds) != 1 {
		ctlmsg.Close(fds)
		return nil, fmt.Errorf("sandbox %s: its supervisor answered a dial with %d descriptors, want 1", rec.ID, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "tent-dial")
	defer f.Close()
	return net.FileConn(f)
}

// Publish publishes m on the running sandbox (see
// [sandbox.Sandbox.Publish]) and returns it with the host port bound; the
// record keeps it, so that tent port lists it and an idle hand-off keeps
// serving it.
func (s *Sandbox) Publish(ctx context.Context, m sandbox.PortMapping) (sandbox.PortMapping, error) {
	rec, err := s.dialRec()
	if err != nil {
		return sandbox.PortMapping{}, err
	}
	rep, err := call(ctx, rec, request{Op: opPublish, Publish: &m}, nil)
	if err != nil {
		return sandbox.PortMapping{}, err
	}
	if rep.Published == nil {
		return sandbox.PortMapping{}, fmt.Errorf("sandbox %s: its supervisor answered a publish without the port", rec.ID)
	}
	return *rep.Published, nil
}

// simple sends a request without descriptors to ref's supervisor.
func (s *Sandbox) simple(ctx context.Context, req request) error {
	rec, err := s.dialRec()
	if err != nil {
		return err
	}
	_, err = call(ctx, rec, req, nil)
	return err
}
