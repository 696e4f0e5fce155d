package supervised

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
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

// spawn starts a supervisor for o and waits until its sandbox is ready. A
// name (not "") must be free in the state directory, but for the sandbox
// id itself (Resume brings a stopped sandbox back under its id and name):
// the names lock is held from that check until the new record is saved.
func (b *Backend) spawn(ctx context.Context, o launch) (sandbox.Info, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Info{}, err
	}
	if name := o.Spec.Name; name != "" {
		if err := validName(name); err != nil {
			return sandbox.Info{}, err
		}
	}
	if err := b.st.ensure(); err != nil {
		return sandbox.Info{}, fmt.Errorf("state directory: %w", err)
	}
	if name := o.Spec.Name; name != "" {
		unlock, err := b.st.LockNames()
		if err != nil {
			return sandbox.Info{}, fmt.Errorf("state directory: %w", err)
		}
		defer unlock()
		other, err := b.st.NameInUse(name)
		if err != nil {
			return sandbox.Info{}, err
		}
		if other != nil && other.ID != o.ID {
			return sandbox.Info{}, &nameError{fmt.Sprintf("the name %q is already used by sandbox %s (%s): choose another name, or tent rm %s", name, other.ID, other.State, other.ID)}
		}
	}
	// What creates killed before their sandbox was saved left goes (see
	// stateDir.sweep): cheap, a directory read.
	if err := b.st.sweep(); err != nil {
		b.log.Debug("sweeping the state directory", "err", err)
	}
	o.Store, o.IdleAfter, o.NetLog = b.st.Dir, b.opts.IdleAfter, b.opts.NetLog
	o.Debug = b.log.Enabled(ctx, slog.LevelDebug)
	if err := b.start(ctx, o); err != nil {
		return sandbox.Info{}, err
	}
	rec, err := b.st.load(o.ID)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info(rec), nil
}

// start runs the supervisor of o and reads its ready line.
func (b *Backend) start(ctx context.Context, o launch) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// The log, locked: what tells a sweep that this sandbox is being
	// created, and, once the supervisor holds it, that it lives.
	logFile, err := openLog(b.st, o.ID)
	if err != nil {
		w.Close()
		return err
	}
	defer logFile.Close()
	// The launch goes through a pipe (fd 4), never the command line:
	// env values are secrets, and every user can read a process's argv.
	lr, lw, err := os.Pipe()
	if err != nil {
		w.Close()
		return err
	}
	defer lr.Close()
	defer lw.Close()
	// The state directory and the id are on the command line (they are
	// no secret) so that ps tells supervisors apart.
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{modeSupervise, b.st.Dir, o.ID}}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logFile, logFile, []*os.File{w, lr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		lw.Close()
		return err
	}
	w.Close()
	lr.Close()
	// The launch pipe stays open after the launch: the acknowledgement
	// of "ok" goes back on it (see acknowledge).
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = json.NewEncoder(lw).Encode(o)
	}()
	b.log.Debug("supervisor started", "id", o.ID, "pid", cmd.Process.Pid)
	// Cancelling ctx while the sandbox is provisioned ends the supervisor
	// as SIGTERM does: it tears down what it made and removes its record.
	cancelled := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	br := bufio.NewReader(r)
	line, _ := br.ReadString('\n')
	if !cancelled() && ctx.Err() != nil { // the signal was sent
		_ = cmd.Wait()
		_ = b.st.removeFiles(o.ID)
		return ctx.Err()
	}
	if strings.TrimSpace(line) == "ok" {
		<-sent // the supervisor has read the launch: the encoder is done
		if err := acknowledge(lw); err != nil {
			_ = cmd.Wait()
			return fmt.Errorf("the sandbox's supervisor ended as it was ready: %w (see %s)", err, logFile.Name())
		}
		// The supervisor outlives this call, not this process: a
		// long-lived caller (tent serve) reaps it when it ends, or each
		// sandbox it ever ran would stay behind as a zombie, holding a
		// pid. (A short-lived one, the CLI, leaves it to init.)
		go func() { _ = cmd.Wait() }()
		return nil
	}
	// A refusal may run over several lines (what is missing, the fix):
	// read it whole, for as long as the supervisor takes to exit.
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(io.LimitReader(br, 1<<20))
	_ = cmd.Wait()
	f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
	if len(f) < 4 || f[0] != "error" {
		// Keep the log: it is all there is to say what happened. (A later
		// sweep removes it, the sandbox having no record: its end is in
		// the error too.)
		return fmt.Errorf("the sandbox's supervisor failed: see %s%s", logFile.Name(), logTail(logFile.Name()))
	}
	_ = os.Remove(logFile.Name()) // a refusal leaves nothing behind
	code, _ := strconv.Atoi(f[1])
	return remoteError(reply{Code: code, Kind: f[2], Error: strings.TrimSpace(f[3] + "\n" + string(rest))})
}

// acknowledge tells the supervisor that its "ok" was read, on the launch
// pipe w, and closes it. A supervisor whose creator ends without
// acknowledging (killed before or while reading "ok") ends its sandbox,
// which nobody else knows the id of: "ok" written into a pipe whose
// reader is dying is not "ok" read. A variable so that tests can be the
// creator that dies just after reading it.
var acknowledge = func(w *os.File) error {
	_, err := w.Write([]byte(ackLine))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// info describes rec.
func (b *Backend) info(rec *record) sandbox.Info {
	spec := rec.Spec
	spec.Name, spec.Labels = rec.Name, rec.Labels
	return sandbox.Info{ID: rec.ID, Backend: Name, State: rec.State, Created: rec.Created, Spec: spec,
		SupervisorPID: rec.Supervisor, CgroupPaths: rec.Cgroups, Protections: rec.Protections, Layers: rec.Layers, Ended: rec.Ended, Reason: rec.Reason}
}

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

// Mount adds m to the running sandbox (see sandbox.Sandbox.Mount); its
// record keeps the new spec.
func (s *Sandbox) Mount(ctx context.Context, m sandbox.Mount) error {
	return s.simple(ctx, request{Op: opMount, Mount: &m})
}

// SetNetworkPolicy replaces a limited sandbox's rules (see
// sandbox.Cmd.SetNetworkPolicy); its record keeps them, the values of
// header transforms only in the supervisor's memory.
func (s *Sandbox) SetNetworkPolicy(ctx context.Context, p sandbox.NetworkPolicy) error {
	return s.simple(ctx, request{Op: opNet, Network: &p, SecretValues: secretValues(p)})
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

// Resume thaws a suspended sandbox; a stopped one (its supervisor gone)
// is provisioned again, under its id and name, from its latest snapshot
// (sandbox.ErrTerminated without one).
func (s *Sandbox) Resume(ctx context.Context) (sandbox.Info, error) {
	rec, err := s.rec()
	if err != nil {
		return sandbox.Info{}, err
	}
	if rec.live() {
		_, err := call(ctx, rec, request{Op: opResume}, nil)
		if err == nil {
			return s.Info(ctx)
		}
		// A supervisor that was just killed closes its socket before it
		// is gone: once it is, the sandbox is a stopped one.
		if !errors.Is(err, sandbox.ErrStopped) || !waitGone(rec) {
			return sandbox.Info{}, err
		}
		rec.State = sandbox.StateStopped
	}
	snaps, err := s.b.Snapshots(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	var latest *sandbox.Snapshot
	for _, s := range snaps {
		if s.SandboxID == rec.ID {
			latest = s
		}
	}
	if latest == nil {
		return sandbox.Info{}, fmt.Errorf("%w: sandbox %s is stopped and has no snapshot to resume from (tent rm %s)", sandbox.ErrTerminated, rec.ID, rec.ID)
	}
	s.b.st.Reclaim(rec) // the old layers are superseded by the snapshot's
	fo := &forkOverrides{Name: rec.Name, Labels: rec.Labels}
	spec := latest.Spec
	spec.Name, spec.Labels = rec.Name, rec.Labels
	return s.b.spawn(ctx, launch{ID: rec.ID, Spec: spec, FromSnapshot: latest.Dir, Overrides: fo})
}

// StopReason is the Reason of a sandbox stopped by Handle.Stop.
const StopReason = "stopped"

// Stop ends the sandbox and keeps its record, stopped (Reason
// StopReason), as its Limits.Timeout running out does; Resume provisions
// it again from its latest snapshot. A sandbox whose supervisor is gone
// is stopped already.
func (s *Sandbox) Stop(ctx context.Context) error {
	rec, err := s.rec()
	if err != nil {
		return err
	}
	if !rec.live() {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, removeAnswerTimeout)
	_, err = call(rctx, rec, request{Op: opStop}, nil)
	cancel()
	switch {
	case err == nil:
	case errors.Is(err, sandbox.ErrStopped):
		return nil
	default:
		return err
	}
	if !waitGone(rec) { // the supervisor exits once its teardown is done
		return fmt.Errorf("sandbox %s: its supervisor (pid %d) did not exit after stopping it", rec.ID, rec.Supervisor)
	}
	return nil
}

// Terminate ends the sandbox and removes its record. Of a sandbox whose
// supervisor is gone (killed: its processes died with it, or die once
// their frozen cgroup is thawed) it reclaims what is left first. A
// sandbox whose record is broken (see [RecordError]) is removed too: its
// supervisor, if one still listens on its socket, removes the sandbox
// (or is killed), and its files go.
func (s *Sandbox) Terminate(ctx context.Context) error {
	rec, err := s.rec()
	if re := (*RecordError)(nil); errors.As(err, &re) && re.ID == s.id {
		return s.b.removeBroken(ctx, s.id)
	}
	if err != nil {
		return err
	}
	if rec.live() {
		// The supervisor answers a removal at once, then tears down.
		rctx, cancel := context.WithTimeout(ctx, removeAnswerTimeout)
		_, err := call(rctx, rec, request{Op: opRemove}, nil)
		cancel()
		switch {
		case err == nil, errors.Is(err, sandbox.ErrStopped):
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// A supervisor that does not answer (stopped, stuck) is
			// killed: its sandbox's processes die with its init, and
			// what is left is reclaimed below, as after a crash.
			s.b.log.Warn("the supervisor did not answer the removal: killing it", "id", rec.ID, "pid", rec.Supervisor)
			killSupervisor(rec)
		default:
			return err
		}
		waitGone(rec) // the supervisor exits once its teardown is done
	}
	s.b.st.Reclaim(rec)
	return s.b.st.removeFiles(rec.ID)
}

// removeAnswerTimeout bounds the wait for a supervisor's answer to a
// removal, which it gives before its teardown: one that has not answered
// by then is stopped or stuck.
var removeAnswerTimeout = 10 * time.Second

// killSupervisor sends SIGKILL to rec's supervisor (stopped or not),
// through a pidfd taken before checking that the pid is still that
// process (its start time), so a recycled pid is never signalled.
func killSupervisor(rec *record) {
	if rec.Supervisor <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(rec.Supervisor, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if supervisorAlive(rec) {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
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

var _ sandbox.Backend = (*Backend)(nil)

// SnapshotsDir is the directory of the state directory's snapshots.
func (b *Backend) SnapshotsDir() string { return b.st.SnapshotsDir() }

// waitGone waits, five seconds at most, for rec's supervisor to exit, and
// reports whether it did.
func waitGone(rec *record) bool {
	for i := 0; i < 500 && supervisorAlive(rec); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return !supervisorAlive(rec)
}

// logTail is the end of a supervisor's log (its last 2 KiB, not following
// a symlink) as a suffix for an error: "" when empty or unreadable.
func logTail(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return ""
	}
	const maxTail = 2048
	off := max(0, fi.Size()-maxTail)
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	tail := strings.TrimSpace(strings.ToValidUTF8(string(b[:n]), "?"))
	if tail == "" {
		return ""
	}
	return ", which ends:\n" + tail
}
