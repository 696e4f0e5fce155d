package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount sources never go through a symlink.
//
// A caller's mount source is a host path, but the directories along it
// may be ones a sandbox can write: a rw mount of /srv/work lets the
// sandbox replace /srv/work/data with a symlink to /root, and a later
// `tent mount ID --rw /srv/work/data:/data` (or a fork or resume that
// re-opens recorded sources) would then attach /root. So tent opens every
// caller's source with openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
// and mounts that descriptor, never the path: a symlink anywhere in the
// path is refused (ELOOP), whoever planted it. Give the resolved path
// (realpath) instead; a relative source is resolved against the current
// directory, which getcwd already reports without symlinks.

// OpenSource opens path as an O_PATH descriptor without following any
// symlink in it (see above). A symlink is an error wrapping
// [ErrInvalidMount] and unix.ELOOP that names the component.
func OpenSource(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return -1, &SourceSymlinkError{Source: path, Link: firstSymlink(path)}
	}
	return -1, &os.PathError{Op: "open", Path: path, Err: err}
}

// StatSource checks that path exists and has no symlink in it, as
// [OpenSource] will open it.
func StatSource(path string) error {
	fd, err := OpenSource(path)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// SourceSymlinkError is a mount source with a symlink in its path.
type SourceSymlinkError struct {
	Source string // the source as given
	Link   string // the first component that is a symlink ("" if it changed meanwhile)
}

func (e *SourceSymlinkError) Error() string {
	at := ""
	if e.Link != "" && e.Link != e.Source {
		at = fmt.Sprintf(" (%s is one)", e.Link)
	}
	return fmt.Sprintf("source %s goes through a symlink%s: tent never follows symlinks in mount sources, which a sandbox may have planted; give the resolved path (realpath %s)",
		e.Source, at, e.Source)
}

// Unwrap makes errors.Is match ErrInvalidMount and unix.ELOOP.
func (e *SourceSymlinkError) Unwrap() []error { return []error{ErrInvalidMount, unix.ELOOP} }

// firstSymlink names the first component of path that is a symlink, for
// the error message only.
func firstSymlink(path string) string {
	cur := "/"
	for _, elem := range strings.Split(filepath.Clean(path), "/") {
		if elem == "" {
			continue
		}
		cur = filepath.Join(cur, elem)
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return cur
		}
	}
	return ""
}
