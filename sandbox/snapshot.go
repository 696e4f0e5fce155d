package sandbox

import (
	"errors"
	"time"
)

// Snapshot is a saved copy of a sandbox's writable layers — its cow
// mounts' changes, its /tmp, its $HOME, its Spec.Tmpfs and (with
// Spec.WritableRoot) what it wrote in its root — and its spec: enough to fork
// a new, independent sandbox in the same state (rw mounts are the host's
// and are not copied).
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Created   time.Time `json:"created"`
	Spec      Spec      `json:"spec"`
	// Parts are its archived layers, each a zstd-compressed tar file
	// (File, in Dir) with its checksum (SHA256, Size), its Kind (cow, tmp,
	// home, tmpfs, root, rw) and where it is in the sandbox (Target).
	Parts []snapshotPart `json:"parts"`
	// Dir is where the snapshot lives (not stored).
	Dir string `json:"-"`
}

// SnapshotOptions name a snapshot.
type SnapshotOptions struct {
	// ID names the snapshot; "" picks a random one.
	ID string
	// SandboxID records which sandbox it was taken of.
	SandboxID string
	// IncludeReadWrite also archives the rw mounts (host directories that
	// the sandbox writes to directly), which are not copied by default:
	// they are the host's, and can be large. Their cost is their whole
	// size, not what changed.
	IncludeReadWrite bool `json:"include_rw,omitempty"`
}

// snapshotPart is one archived layer: a zstd-compressed tar file with
// its checksum.
type snapshotPart struct {
	File   string `json:"file"`
	Kind   string `json:"kind"`   // cow, tmp, home, tmpfs, root, rw
	Target string `json:"target"` // the path inside the sandbox
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// ErrSnapshotCorrupt is returned for a snapshot whose files do not match
// its manifest.
var ErrSnapshotCorrupt = errors.New("snapshot corrupt")
