//go:build linux

package supervised

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
)

// record is the durable description of a long-lived sandbox, one JSON
// file per sandbox in the state directory, written atomically so that a
// crash leaves the old or the new record, never a torn one.
type record struct {
	recordHead
	Name    string            `json:"name,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// Socket is the supervisor's control socket.
	Socket string       `json:"socket,omitempty"`
	Spec   sandbox.Spec `json:"spec"`
	// Protections as reported at provision time.
	Protections []sandbox.Protection `json:"protections,omitempty"`
	// Layers are the host sides of the cow mounts (see DiffLayers).
	Layers []sandbox.CowLayer `json:"layers,omitempty"`
	// Cgroups are the sandbox's cgroup directories.
	Cgroups []string `json:"cgroups,omitempty"`
	// Ended is when a sandbox ended on its own (its Limits.Timeout ran
	// out, or its init died), and Reason says why: such a record stays,
	// in state "stopped", until it is removed (as docker ps -a shows an
	// exited container).
	Ended *time.Time `json:"ended,omitempty"`
	// Reason says why a stopped sandbox ended.
	Reason string `json:"reason,omitempty"`
}

// recordHead is the part of a record that reaching its supervisor needs
// (its fields are the record's, in its JSON too). A process's first
// decoding of a whole record builds encoding/json's decoder for every
// type of its Spec, about 0.25 ms; a client that only dials the
// supervisor (tent exec) decodes this instead (stateDir.head).
type recordHead struct {
	ID string `json:"id"`
	// State is "running" or "suspended" while its supervisor lives;
	// readers reconcile it (see [stateDir.List]) to "stopped" when the
	// supervisor is gone.
	State sandbox.State `json:"state"`
	// Supervisor is the pid of the process that owns the sandbox.
	Supervisor int `json:"supervisor_pid,omitempty"`
	// SupervisorStart is when the supervisor started, in clock ticks
	// since boot (/proc/PID/stat's starttime): with the pid, it names
	// the supervisor (a recycled pid has another start time).
	SupervisorStart uint64 `json:"supervisor_start,omitempty"`
}

// stateDir is a state directory.
type stateDir struct{ Dir string }

// ensure creates the state directory (0700) if needed and checks that
// it can be trusted (see checkDir).
func (s stateDir) ensure() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	return s.checkDir()
}

func (s stateDir) path(id string) string { return filepath.Join(s.Dir, id+".json") }

// load reads the record of id as saved, without reconciling its state.
func (s stateDir) load(id string) (*record, error) {
	var r record
	if err := s.decode(id, &r, &r.ID); err != nil {
		return nil, err
	}
	r.Socket = s.SocketPath(id) // never where a record points
	return &r, nil
}

// head reads what of id's record dialing its supervisor needs (its id,
// state and supervisor, and the socket; the rest of the record is
// zero), reconciled as Get reconciles a record.
func (s stateDir) head(id string) (*record, error) {
	var h recordHead
	if err := s.decode(id, &h, &h.ID); err != nil {
		return nil, err
	}
	r := &record{recordHead: h, Socket: s.SocketPath(id)}
	r.reconcile()
	return r, nil
}

// decode reads the record of id into v, whose id field is *got, and
// checks that the record names id.
func (s stateDir) decode(id string, v any, got *string) error {
	if !validID(id) {
		return fmt.Errorf("%w: %q is not a sandbox id", sandbox.ErrNotFound, id)
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	b, err := os.ReadFile(s.path(id))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("state record %s: %w", s.path(id), err)
	}
	if *got != id {
		return fmt.Errorf("state record %s names sandbox %q", s.path(id), *got)
	}
	return nil
}

// SnapshotsDir holds the snapshots (see Sandbox.Snapshot).
func (s stateDir) SnapshotsDir() string { return filepath.Join(s.Dir, "snapshots") }

// SocketPath is where the supervisor of id listens.
func (s stateDir) SocketPath(id string) string { return filepath.Join(s.Dir, id+".sock") }

// Save writes r atomically: a temporary file in the same directory,
// fsync'd, renamed over the record, and the directory fsync'd.
func (s stateDir) Save(r *record) error {
	if err := s.ensure(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.Dir, "."+r.ID+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), s.path(r.ID)); err != nil {
		return err
	}
	if d, err := os.Open(s.Dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// keepEnded is the supervisor's last act for a sandbox that ended on its
// own (sb.Done() closed, not removed or signalled): the record is saved
// as "stopped" with the time and the reason, and the socket and the
// supervisor's log are removed; the record stays until [stateDir.Remove].
func (s stateDir) keepEnded(rec *record, reason string) error {
	now := time.Now().UTC()
	rec.State, rec.Ended, rec.Reason = sandbox.StateStopped, &now, reason
	_ = os.Remove(s.SocketPath(rec.ID))
	_ = os.Remove(filepath.Join(s.Dir, rec.ID+".log"))
	if err := s.Save(rec); err != nil {
		_ = s.removeFiles(rec.ID)
		return err
	}
	return nil
}

// removeFiles deletes id's record, socket and supervisor log.
func (s stateDir) removeFiles(id string) error {
	_ = os.Remove(s.SocketPath(id))
	_ = os.Remove(filepath.Join(s.Dir, id+".log"))
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// List reads every record, oldest first, reconciling each one's state
// with its supervisor: a record whose supervisor is gone reads "stopped".
//
// The directory must be the caller's (see [ErrUnsafeStateDir]); files
// not named after a sandbox id (16 hex digits) are not records, and a
// record must name the id of its file.
func (s stateDir) List() ([]*record, error) {
	if err := s.checkDir(); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(s.Dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		if !validID(id) {
			continue
		}
		r, err := s.load(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		r.reconcile()
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Get finds a record by exact id, exact name or unique id prefix.
//
// An exact id always wins (ids are unique). Otherwise every sandbox whose
// name equals ref or whose id starts with ref matches, and more than one
// match is refused with [ErrAmbiguous] naming them all: a lookup is never
// resolved to the first match, so that tent exec or tent rm cannot act
// on a sandbox the caller did not mean. Names are unique per state
// directory (tent create refuses a second one; see [stateDir.NameInUse]),
// but records written by older versions may share one.
func (s stateDir) Get(ref string) (*record, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty id", sandbox.ErrNotFound)
	}
	if validID(ref) {
		// An exact id wins, and names never have an id's shape: read that
		// one record rather than every one.
		r, err := s.load(ref)
		if err == nil {
			r.reconcile()
			return r, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	var matches []*record
	for _, r := range all {
		if r.ID == ref {
			return r, nil
		}
		if r.Name == ref || strings.HasPrefix(r.ID, ref) {
			matches = append(matches, r)
		}
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("%w: %q (see tent ls)", sandbox.ErrNotFound, ref)
	case 1:
		return matches[0], nil
	}
	var names []string
	for _, r := range matches {
		n := r.ID
		if r.Name != "" {
			n += " (" + r.Name + ")"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%w: %q matches %d sandboxes: %s; use a full id", sandbox.ErrAmbiguous, ref, len(matches), strings.Join(names, ", "))
}

// NameInUse returns the record of the sandbox named name, or nil when no
// sandbox has that name. A stopped sandbox keeps its name until it is
// removed.
func (s stateDir) NameInUse(name string) (*record, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}

// LockNames takes an exclusive lock on the state directory's names (flock
// of the directory itself, so that no lock file is left behind) and
// returns the function that releases it. tent create holds it from the
// check that a name is free until the new sandbox's record is saved, so
// that two concurrent creates cannot both take one name.
func (s stateDir) LockNames() (unlock func(), err error) {
	if err := s.ensure(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.Dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", s.Dir, err)
	}
	return func() { f.Close() }, nil
}

// Usage reads what the running or suspended sandbox rec names uses now
// from its cgroups (see [cgroups.ReadUsage]). Only directories at the
// shape tent gives them are read (a record is data). A sandbox without a
// cgroup (an unprivileged caller without delegation) fails with
// [sandbox.ErrUnsupported]; a stopped one with [ErrStopped].
func (s stateDir) Usage(rec *record) (sandbox.Usage, error) {
	if !rec.live() {
		return sandbox.Usage{}, fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrStopped, rec.ID, rec.State)
	}
	var dirs []string
	for _, d := range rec.Cgroups {
		if validCgroupDir(d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return sandbox.Usage{}, fmt.Errorf("%w: sandbox %s has no cgroup to read its usage from (see tent doctor)", sandbox.ErrUnsupported, rec.ID)
	}
	return cgroups.ReadUsage(dirs), nil
}

// live reports whether r's sandbox had a supervisor when r was saved.
// reconcile makes a live record whose supervisor is gone "stopped", as
// every reader sees it.
func (r *record) reconcile() {
	if r.live() && !supervisorAlive(r) {
		r.State = sandbox.StateStopped
	}
}

func (r *record) live() bool {
	return r.State == sandbox.StateRunning || r.State == sandbox.StateSuspended
}

// supervisorAlive reports whether rec's supervisor still runs. A record
// names its supervisor by pid and start time, so a recycled pid is not
// taken for it (an exec in progress, such as the hand-off to the idle
// holder, hides a process's command line but not its start time).
func supervisorAlive(rec *record) bool {
	return namespaces.ProcessRunsSince(rec.Supervisor, rec.SupervisorStart)
}
