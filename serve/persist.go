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

	"github.com/tent-sandbox/tent/internal/secretfile"
	"github.com/tent-sandbox/tent/sandbox"
)

// savedBox is what Options.StateFile keeps of one sandbox: the E2B
// settings a restarted server cannot read back from the backend.
type savedBox struct {
	Created       bool           `json:"created,omitempty"`
	EndAt         time.Time      `json:"end_at,omitzero"`
	OnTimeout     string         `json:"on_timeout,omitempty"`
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
		st.Sandboxes[id] = &savedBox{Created: b.created, EndAt: b.endAt, OnTimeout: b.onTimeout,
			AutoResume: b.autoResume, AllowInternet: b.allowInternet, Network: b.network, Ports: b.ports}
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

// writeFileAtomic writes data to path through a temporary file in the
// same directory, synced, then renamed over path.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
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
			b.onTimeout = onTimeoutPause
		}
		if !b.endAt.IsZero() && info.State == sandbox.StateRunning {
			s.armLocked(b, max(time.Until(b.endAt), time.Millisecond))
		}
		s.log.Info("sandbox taken up from the state file", "id", info.ID, "end", b.endAt)
	}
	s.markDirtyLocked()
	return nil
}
