package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
)

var (
	// ErrNotFound is returned for an id or prefix that names no sandbox.
	ErrNotFound = errors.New("no such sandbox")
	// ErrAmbiguous is returned for a reference (an id prefix, a name) that
	// matches several sandboxes.
	ErrAmbiguous = errors.New("ambiguous sandbox reference")
)

// Record is the durable description of a long-lived sandbox, one JSON
// file per sandbox in the state directory, written atomically so that a
// crash leaves the old or the new record, never a torn one.
type Record struct {
	ID      string            `json:"id"`
	Name    string            `json:"name,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// State is "running" or "suspended" while its supervisor lives;
	// readers reconcile it (see [Store.List]) to "stopped" when the
	// supervisor is gone.
	State string `json:"state"`
	// Supervisor is the pid of the process that owns the sandbox.
	Supervisor int `json:"supervisor_pid,omitempty"`
	// SupervisorStart is when the supervisor started, in clock ticks
	// since boot (/proc/PID/stat's starttime): with the pid, it names
	// the supervisor (a recycled pid has another start time).
	SupervisorStart uint64 `json:"supervisor_start,omitempty"`
	// Socket is the supervisor's control socket.
	Socket string `json:"socket,omitempty"`
	// Args are the `tent create` flags the sandbox was made from.
	Args []string `json:"args,omitempty"`
	Spec Spec     `json:"spec"`
	// Protections as reported at provision time.
	Protections []Protection `json:"protections,omitempty"`
	// Layers are the host sides of the cow mounts (see DiffLayers).
	Layers []CowLayer `json:"layers,omitempty"`
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

// Store is a state directory.
type Store struct{ Dir string }

// DefaultStateDir is $TENT_STATE_DIR, else /var/lib/tent for root, else
// $XDG_STATE_HOME/tent, else ~/.local/state/tent.
func DefaultStateDir() string {
	if d := os.Getenv("TENT_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/tent"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "tent")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "tent")
}

// NewID returns a fresh random sandbox id (16 hex digits).
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensure creates the state directory (0700) if needed and checks that
// it can be trusted (see checkDir).
func (s Store) ensure() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	return s.checkDir()
}

func (s Store) path(id string) string { return filepath.Join(s.Dir, id+".json") }

// load reads the record of id as saved, without reconciling its state.
func (s Store) load(id string) (*Record, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: %q is not a sandbox id", ErrNotFound, id)
	}
	if err := s.checkDir(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.path(id))
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("state record %s: %w", s.path(id), err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("state record %s names sandbox %q", s.path(id), r.ID)
	}
	r.Socket = s.SocketPath(id) // never where a record points
	return &r, nil
}

// SnapshotsDir holds the snapshots (see Sandbox.Snapshot).
func (s Store) SnapshotsDir() string { return filepath.Join(s.Dir, "snapshots") }

// Snapshots lists the snapshots, oldest first; damaged ones are skipped
// from the listing but stay on disk.
func (s Store) Snapshots() ([]*Snapshot, error) {
	if err := s.checkDir(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.SnapshotsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.SnapshotsDir(), e.Name(), manifestName))
		if err != nil {
			continue
		}
		var snap Snapshot
		if json.Unmarshal(b, &snap) == nil {
			snap.Dir = filepath.Join(s.SnapshotsDir(), e.Name())
			out = append(out, &snap)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Snapshot finds a snapshot by id or unique prefix and verifies it.
func (s Store) Snapshot(ref string) (*Snapshot, error) {
	all, err := s.Snapshots()
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(all))
	for i, snap := range all {
		ids[i] = snap.ID
	}
	id, err := resolveRef(ref, ids, "snapshot")
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: no snapshot %q (see tent snapshot ls)", ErrNotFound, ref)
	}
	if err != nil {
		return nil, err
	}
	match := all[slices.Index(ids, id)]
	return LoadSnapshot(match.Dir)
}

// SocketPath is where the supervisor of id listens.
func (s Store) SocketPath(id string) string { return filepath.Join(s.Dir, id+".sock") }

// Save writes r atomically: a temporary file in the same directory,
// fsync'd, renamed over the record, and the directory fsync'd.
func (s Store) Save(r *Record) error {
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
// supervisor's log are removed; the record stays until [Store.Remove].
func (s Store) keepEnded(rec *Record, sb *Sandbox) error {
	reason := "its init exited"
	if !sb.deadline.IsZero() && !time.Now().Before(sb.deadline) {
		reason = fmt.Sprintf("timed out after %s", sb.spec.Limits.Timeout)
	}
	now := time.Now().UTC()
	rec.State, rec.Ended, rec.Reason = "stopped", &now, reason
	_ = os.Remove(s.SocketPath(rec.ID))
	_ = os.Remove(filepath.Join(s.Dir, rec.ID+".log"))
	if err := s.Save(rec); err != nil {
		_ = s.removeFiles(rec.ID)
		return err
	}
	return nil
}

// removeFiles deletes id's record, socket and supervisor log.
func (s Store) removeFiles(id string) error {
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
func (s Store) List() ([]*Record, error) {
	if err := s.checkDir(); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(s.Dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Record
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
		if (r.State == "running" || r.State == "suspended") && !supervisorAlive(r) {
			r.State = "stopped"
		}
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
// directory (tent create refuses a second one; see [Store.NameInUse]),
// but records written by older versions may share one.
func (s Store) Get(ref string) (*Record, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty id", ErrNotFound)
	}
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	var matches []*Record
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
		return nil, fmt.Errorf("%w: %q (see tent ls)", ErrNotFound, ref)
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
	return nil, fmt.Errorf("%w: %q matches %d sandboxes: %s; use a full id", ErrAmbiguous, ref, len(matches), strings.Join(names, ", "))
}

// NameInUse returns the record of the sandbox named name, or nil when no
// sandbox has that name. A stopped sandbox keeps its name until it is
// removed.
func (s Store) NameInUse(name string) (*Record, error) {
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
func (s Store) LockNames() (unlock func(), err error) {
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
// [ErrUnsupported]; a stopped one with [ErrStopped].
func (s Store) Usage(rec *Record) (Usage, error) {
	if rec.State != "running" && rec.State != "suspended" {
		return Usage{}, fmt.Errorf("%w: sandbox %s is %s", ErrStopped, rec.ID, rec.State)
	}
	var dirs []string
	for _, d := range rec.Cgroups {
		if validCgroupDir(d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return Usage{}, fmt.Errorf("%w: sandbox %s has no cgroup to read its usage from (see tent doctor)", ErrUnsupported, rec.ID)
	}
	return cgroups.ReadUsage(dirs), nil
}
