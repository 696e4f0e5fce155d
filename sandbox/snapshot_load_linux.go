package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

// LoadSnapshot reads the snapshot in dir and verifies every part against
// its checksum (ErrSnapshotCorrupt when one differs).
func LoadSnapshot(dir string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	var snap Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrSnapshotCorrupt, err)
	}
	for _, p := range snap.Parts {
		if filepath.Base(p.File) != p.File {
			return nil, fmt.Errorf("%w: part %q", ErrSnapshotCorrupt, p.File)
		}
		sum, n, err := fileSHA256(filepath.Join(dir, p.File))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
		if sum != p.SHA256 || n != p.Size {
			return nil, fmt.Errorf("%w: %s does not match its checksum", ErrSnapshotCorrupt, p.File)
		}
	}
	snap.Dir = dir
	return &snap, nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// ListSnapshots lists the snapshots in dir, oldest first; damaged ones
// are left out of the listing but stay on disk. A missing dir holds none.
func ListSnapshots(dir string) ([]*Snapshot, error) {
	ents, err := os.ReadDir(dir)
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
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), manifestName))
		if err != nil {
			continue
		}
		var snap Snapshot
		if json.Unmarshal(b, &snap) == nil {
			snap.Dir = filepath.Join(dir, e.Name())
			out = append(out, &snap)
		}
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// FindSnapshot finds the snapshot in dir whose id is ref or starts with
// it (ErrNotFound, ErrAmbiguous) and verifies it (see [LoadSnapshot]).
func FindSnapshot(dir, snapRef string) (*Snapshot, error) {
	all, err := ListSnapshots(dir)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(all))
	for i, snap := range all {
		ids[i] = snap.ID
	}
	id, err := ref.Resolve(snapRef, ids, "snapshot")
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: no snapshot %q (see tent snapshot ls)", ErrNotFound, snapRef)
	}
	if err != nil {
		return nil, err
	}
	return LoadSnapshot(all[slices.Index(ids, id)].Dir)
}
