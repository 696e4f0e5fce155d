package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/secretfile"
	"github.com/tent-sandbox/tent/sandbox"
)

// savedBox is what Options.StateFile keeps of one sandbox: the E2B
// settings a restarted server cannot read back from the backend.
type savedBox struct {
	Created    bool      `json:"created,omitempty"`
	EndAt      time.Time `json:"end_at,omitzero"`
	OnTimeout  string    `json:"on_timeout,omitempty"`
	PauseFiles bool      `json:"pause_files,omitempty"`
	// PauseSnapshot is the directory of a filesystem-only pause's
	// snapshot, removed once the sandbox is resumed or killed.
	PauseSnapshot string         `json:"pause_snapshot,omitempty"`
	AutoResume    bool           `json:"auto_resume,omitempty"`
	AllowInternet *bool          `json:"allow_internet_access,omitempty"`
	Network       *networkConfig `json:"network,omitempty"`
	Ports         *portSettings  `json:"ports,omitempty"`
}

// savedState is the state file's document.
type savedState struct {
	Version   int                  `json:"version"`
	Sandboxes map[string]*savedBox `json:"sandboxes"`
}

// maxStateFile bounds the state file read back.
const maxStateFile = 64 << 20

// markDirtyLocked asks the writer to save the state file. The caller
// holds s.mu.
func (s *Server) markDirtyLocked() {
	if s.dirty == nil {
		return
	}
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// saveLoop writes the state file whenever it is marked dirty, until
// stop is closed; it writes once more then.
func (s *Server) saveLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-s.dirty:
			s.save()
		case <-stop:
			s.save()
			return
		}
	}
}

// save writes the state file now: every sandbox the server created or
// gave a timeout, atomically (a temporary file renamed over it), mode
// 0600. A failure is logged: the sandboxes run on regardless.
func (s *Server) save() {
	st := savedState{Version: 1, Sandboxes: map[string]*savedBox{}}
	s.mu.Lock()
	for id, b := range s.boxes {
		if !b.created && b.endAt.IsZero() && b.network == nil {
			continue
		}
		st.Sandboxes[id] = &savedBox{Created: b.created, EndAt: b.endAt, OnTimeout: b.onTimeout, PauseFiles: b.pauseFiles,
			AutoResume: b.autoResume, AllowInternet: b.allowInternet, Network: b.network, Ports: b.ports}
		if b.pauseSnap != nil {
			st.Sandboxes[id].PauseSnapshot = b.pauseSnap.dir
		}
	}
	s.mu.Unlock()
	data, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		err = writeFileAtomic(s.opts.StateFile, data)
	}
	if err != nil {
		s.log.Error("saving the server's state failed", "file", s.opts.StateFile, "err", err)
	}
}

// stateTemps names the temporaries the state file is written through,
// beside it: .NAME.tmp-HEX (an older server's os.CreateTemp made
// .NAME.tmp-DIGITS, which match too).
func stateTemps(path string) atomicfile.Options {
	return atomicfile.Options{Prefix: "." + filepath.Base(path) + ".tmp-"}
}

// writeFileAtomic writes data to path (mode 0600) with atomicfile: a
// temporary beside it, synced, renamed over it, the directory synced.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, 0o600, stateTemps(path))
}

// cleanTemps removes the temporaries of path's that a killed writer left
// beside it (see atomicfile.Options.Clean); o names them.
func cleanTemps(path string, o atomicfile.Options) {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return
	}
	defer d.Close()
	_, _ = o.Clean(int(d.Fd()))
}

// load reads the state file, if any: it must be the caller's and not
// readable by others, as the API key's.
func loadState(path string) (*savedState, error) {
	b, err := secretfile.ReadPrivateMax(path, "state", maxStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return &savedState{Sandboxes: map[string]*savedBox{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var saved savedState
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if saved.Version != 1 {
		return nil, fmt.Errorf("state file %s: version %d, want 1", path, saved.Version)
	}
	if saved.Sandboxes == nil {
		saved.Sandboxes = map[string]*savedBox{}
	}
	return &saved, nil
}

// restore takes up the settings of the sandboxes an earlier server saved
// that the backend still has: their timeouts are armed again (one
// already past expires now); the others are dropped.
func (s *Server) restore(ctx context.Context, saved *savedState) error {
	if len(saved.Sandboxes) == 0 {
		return nil
	}
	infos, err := s.b.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the backend's sandboxes: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, info := range infos {
		sv := saved.Sandboxes[info.ID]
		if sv == nil {
			continue
		}
		b := s.boxLocked(info.ID)
		b.created, b.endAt = sv.Created, sv.EndAt
		b.autoResume, b.allowInternet, b.network, b.ports = sv.AutoResume, sv.AllowInternet, sv.Network, sv.Ports
		if sv.OnTimeout == onTimeoutPause {
			b.onTimeout, b.pauseFiles = onTimeoutPause, sv.PauseFiles
		}
		if d := sv.PauseSnapshot; d != "" && info.State == sandbox.StateStopped {
			b.pauseSnap = pauseSnapshotAt(d, info.ID)
		}
		if !b.endAt.IsZero() && info.State == sandbox.StateRunning {
			s.armLocked(b, max(time.Until(b.endAt), time.Millisecond))
		}
		s.log.Info("sandbox taken up from the state file", "id", info.ID, "end", b.endAt)
	}
	s.markDirtyLocked()
	return nil
}

// pauseSnapshotAt returns the record of the filesystem-only pause
// snapshot the state file names at dir, if dir is the directory of a
// snapshot of sandbox id in its store (nil otherwise): the file never
// makes the server remove anything but such a snapshot.
func pauseSnapshotAt(dir, id string) *snapRecord {
	if !filepath.IsAbs(dir) {
		return nil
	}
	snaps, err := sandbox.ListSnapshots(filepath.Dir(dir))
	if err != nil {
		return nil
	}
	for _, sn := range snaps {
		if sn.Dir == dir && sn.ID == filepath.Base(dir) && sn.SandboxID == id {
			return &snapRecord{id: sn.ID, dir: sn.Dir, sandboxID: id, created: sn.Created}
		}
	}
	return nil
}
