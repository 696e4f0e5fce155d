package files

import (
	"os"
	"time"
)

// FileInfo describes one file as the helper reports it.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
	// Link is a symlink's target, as the link holds it.
	Link string `json:"link,omitempty"`
	// Target is what a symlink resolves to, every link on the way
	// followed (nil when it resolves to nothing, or is not a symlink).
	Target *LinkTarget `json:"target,omitempty"`
	// Path is the file's absolute path (relative paths are taken from
	// the helper's working directory, the sandbox's workdir).
	Path string `json:"path,omitempty"`
	// UID and GID own the file; Owner and Group are their names in the
	// sandbox's /etc/passwd and /etc/group, "" where it has none.
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Metadata are the file's extended attributes in the
	// MetadataXattrPrefix namespace, by name without the prefix (nil
	// when it has none, and for symlinks).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// LinkTarget is the file a symlink resolves to.
type LinkTarget struct {
	// Path is its absolute path, without symlinks.
	Path string `json:"path"`
	// Mode is its type and permissions.
	Mode os.FileMode `json:"mode"`
}

// MetadataXattrPrefix is the extended-attribute namespace of the file
// helper's file metadata (E2B's envd keeps file metadata there too):
// put sets it, stat and list report it.
const MetadataXattrPrefix = "user.e2b."

// Bounds of file metadata: how many entries, and how long a name (the
// part after MetadataXattrPrefix) or a value may be. Entries beyond are
// not reported; put refuses them with EINVAL.
const (
	MaxMetadataEntries = 64
	MaxMetadataName    = 200
	MaxMetadataValue   = 4096
)

// WatchEvent is one JSON line of the file helper's "watch" op. The op
// watches the directory at its path (symlinks followed) with inotify
// and writes {"ready":true} once the watch is in place, then one line
// per change until its stdin reaches EOF (or it is killed): Op is
// create (also a file moved in), write, remove, rename (also a file
// moved out) or chmod, and Name the changed path relative to the
// watched directory. Its arguments are flags: "recursive" watches the
// subdirectories too, those there at the start and those created later
// (at most [MaxWatchDirs] directories, ENOSPC beyond); "entries" adds
// the FileInfo of the changed path where it still exists. When the
// watched directory itself is removed or moved away, the op ends. The
// helper's own write (a temporary beside the file, see WriteTemps,
// renamed over it) is reported as E2B's daemon reports its write of a
// new file (it creates the file, sets its owner, writes the data): a
// create, a chmod and a write of the file; its temporary is not
// reported.
type WatchEvent struct {
	Ready bool      `json:"ready,omitempty"`
	Op    string    `json:"op,omitempty"`
	Name  string    `json:"name,omitempty"`
	Info  *FileInfo `json:"info,omitempty"`
}

// MaxWatchDirs bounds the directories one recursive watch holds (inotify
// watches count against the sandbox owner's per-user limit).
const MaxWatchDirs = 4096
