//go:build linux

package supervised

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
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
	// InitPID is the host pid of the sandbox's init.
	InitPID int `json:"init_pid,omitempty"`
	// CgroupParents are the cgroup directories a child supervisor made
	// for ChildLaunch.CgroupsPath and joined (see cgroups.JoinPath),
	// removed once it is gone.
	CgroupParents []string `json:"cgroup_parents,omitempty"`
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

// SnapshotsDir holds the snapshots (see Sandbox.Snapshot).
func (s stateDir) SnapshotsDir() string { return filepath.Join(s.Dir, "snapshots") }

// SocketPath is where the supervisor of id listens.
func (s stateDir) SocketPath(id string) string { return filepath.Join(s.Dir, id+".sock") }

// recordTemps names the temporaries of id's record being saved
// (.ID.HEX.tmp; those of older tents, .ID.DECIMAL.tmp, match too): the
// next Save of id removes those a killed writer left, as Reclaim and the
// sweep do (see leftoverID).
func recordTemps(id string) atomicfile.Options {
	return atomicfile.Options{Prefix: "." + id + ".", Suffix: ".tmp"}
}

// Save writes r atomically, beneath the state directory's descriptor
// (atomicfile): a temporary file beside the record (recordTemps, created
// exclusively, 0600, locked while written), written whole and fsync'd,
// renamed over the record, and the directory fsync'd, so that a crash or
// a full disk leaves the old record or the new one, never a torn one.
// The temporary of a write that failed is removed; those of a process
// killed while writing go with the next Save of the record, or with the
// sandbox's other files ([stateDir.Reclaim], [stateDir.sweep]).
func (s stateDir) Save(r *record) error {
	if err := s.ensure(); err != nil {
		return err
	}
	if !validID(r.ID) {
		return fmt.Errorf("saving a record: %q is not a sandbox id", r.ID)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	d, err := s.openDir()
	if err != nil {
		return err
	}
	defer d.Close()
	o := recordTemps(r.ID)
	_, _ = o.Clean(dirFD(d))
	f, err := atomicfile.CreateAt(dirFD(d), r.ID+".json", 0o600, o)
	if err != nil {
		return fmt.Errorf("saving the record of %s in %s: %w", r.ID, s.Dir, err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Abort()
		return fmt.Errorf("saving the record of %s in %s: %w", r.ID, s.Dir, err)
	}
	if err := f.Commit(); err != nil && !f.Renamed() {
		return fmt.Errorf("saving the record of %s in %s: %w", r.ID, s.Dir, err)
	}
	// An error after the rename (syncing the directory) is not the
	// save's: the new record is in place, and the callers that saw an
	// error would tear down a sandbox that its record says runs.
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
	_ = secretstore.Open(s.Dir).DeleteScope(id) // values given for it alone
	_ = os.Remove(s.SocketPath(id))
	_ = os.Remove(filepath.Join(s.Dir, id+".log"))
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
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
		r.State, r.Reason = sandbox.StateStopped, supervisorGoneReason(r, bootTime())
	}
}

// supervisorGoneReason says why a sandbox whose supervisor is gone
// stopped: nobody could write it down (SIGKILL, a crash, the host's
// restart take the supervisor before it can), so it is told from what
// is known. A supervisor started before this boot went with the host's
// restart (booted is zero when unknown).
func supervisorGoneReason(r *record, booted time.Time) string {
	if !booted.IsZero() && !r.Created.IsZero() && r.Created.Before(booted) {
		return fmt.Sprintf("the host restarted: its supervisor (pid %d) is gone", r.Supervisor)
	}
	return fmt.Sprintf("its supervisor (pid %d) died: killed or crashed", r.Supervisor)
}

// bootTime is when the host booted (/proc/stat's btime), zero if unknown.
var bootTime = sync.OnceValue(func() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
})

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
