package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/sandbox/transfer"
)

// A volume's files are hostile input: every sandbox that mounts the
// volume writes there (symbolic links, FIFOs, sparse files, deep trees,
// names), at any moment, and the content API acts on them as the
// server's user. So every operation is done beneath the descriptor of the
// volume's data directory, never through a path the host resolves alone:
// a path is resolved with openat2 refusing every symbolic link on the way
// (RESOLVE_NO_SYMLINKS) and any step out of the directory, the last
// component is acted on relative to its parent's descriptor without
// following it (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), what is opened is
// checked by fstat on the descriptor opened, and a FIFO cannot block an
// open (O_NONBLOCK). Links inside a volume are listed and removed as
// links, never followed.

// resolveBeneath keeps a resolution inside the volume and off every
// symbolic link (and /proc's magic links), on one mount.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// volumeFS is a volume's data directory, held open.
type volumeFS struct {
	root int // O_PATH | O_DIRECTORY
	// owner is the directory's on-disk owner: entries it owns are the
	// sandbox user's inside every sandbox that mounts the volume.
	owner, group uint32
}

// openVolumeFS opens dir, which must be a directory and not a link.
func openVolumeFS(dir string) (*volumeFS, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the volume: %w", os.NewSyscallError("open", err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("fstat", err)
	}
	return &volumeFS{root: fd, owner: st.Uid, group: st.Gid}, nil
}

func (v *volumeFS) Close() error { return unix.Close(v.root) }

// pathError maps an errno met on the way to rel to the API's answer: a
// missing entry (or a file where a directory was wanted) is 404, a link
// on the way 400.
func pathError(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return errorf(http.StatusNotFound, "Path %s not found", apiPath(rel))
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errorf(http.StatusBadRequest, "path %s: a symbolic link or another mount on the way: the volume API does not follow links", apiPath(rel))
	case errors.Is(err, unix.ENAMETOOLONG):
		return errorf(http.StatusBadRequest, "path %s: a name is too long", apiPath(rel))
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return errorf(http.StatusForbidden, "path %s: permission denied (a sandbox took the server's access away: change the mode back, from a sandbox or with a PATCH of the entry)", apiPath(rel))
	}
	return fmt.Errorf("volume path %s: %w", apiPath(rel), err)
}

// openDir opens directory rel (read-only, for listing or as a parent).
func (v *volumeFS) openDir(rel string) (int, error) {
	fd, err := unix.Openat2(v.root, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
	if errors.Is(err, unix.ENOTDIR) && v.isLink(rel) {
		err = unix.ELOOP // a link where a directory is wanted: say so
	}
	if err != nil {
		return -1, pathError(rel, err)
	}
	return fd, nil
}

// isLink reports whether rel itself is a symbolic link (reached without
// following any).
func (v *volumeFS) isLink(rel string) bool {
	fd, err := unix.Openat2(v.root, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// parent opens rel's parent directory and returns it with rel's last
// name. rel must not be the root.
func (v *volumeFS) parent(rel string) (int, string, error) {
	dir, name := path.Split(rel)
	if dir == "" {
		dir = "."
	}
	fd, err := v.openDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

// entryOf describes st, the entry at rel. The owner is reported as a
// sandbox of the server sees it: the volume's owner is the sandbox's
// user (E2B's, uid 1000), any other id is unmapped there (nobody).
func (v *volumeFS) entryOf(rel string, st *unix.Stat_t) volumeEntry {
	e := volumeEntry{
		Name:  path.Base(apiPath(rel)),
		Path:  apiPath(rel),
		Size:  st.Size,
		Mode:  st.Mode & 0o7777,
		UID:   overflowID,
		GID:   overflowID,
		Atime: time.Unix(st.Atim.Unix()).UTC(),
		Mtime: time.Unix(st.Mtim.Unix()).UTC(),
		Ctime: time.Unix(st.Ctim.Unix()).UTC(),
	}
	if st.Uid == v.owner {
		e.UID = e2bUID
	}
	if st.Gid == v.group {
		e.GID = e2bUID
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "directory"
	case unix.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "unknown"
	}
	return e
}

// stat describes rel without following it.
func (v *volumeFS) stat(rel string) (volumeEntry, error) {
	var st unix.Stat_t
	if rel == "." {
		if err := unix.Fstat(v.root, &st); err != nil {
			return volumeEntry{}, os.NewSyscallError("fstat", err)
		}
		return v.entryOf(rel, &st), nil
	}
	dir, name, err := v.parent(rel)
	if err != nil {
		return volumeEntry{}, err
	}
	defer unix.Close(dir)
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return volumeEntry{}, pathError(rel, err)
	}
	e := v.entryOf(rel, &st)
	if e.Type == "symlink" {
		e.Target = readlinkAt(dir, name)
	}
	return e, nil
}

// readlinkAt reads link name in dir ("" if it cannot).
func readlinkAt(dir int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// openFile opens regular file rel for reading; anything else is refused
// without blocking (a FIFO) or following (a link).
func (v *volumeFS) openFile(rel string) (*os.File, int64, error) {
	if rel == "." {
		return nil, 0, errorf(http.StatusBadRequest, "path /: a directory, not a file")
	}
	dir, name, err := v.parent(rel)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return nil, 0, errorf(http.StatusBadRequest, "path %s: not a regular file", apiPath(rel))
		}
		return nil, 0, pathError(rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, errorf(http.StatusBadRequest, "path %s: not a regular file", apiPath(rel))
	}
	return os.NewFile(uintptr(fd), apiPath(rel)), st.Size, nil
}

// writeFile writes r to rel, a new file unless force replaces one,
// through a temporary file beside it renamed into place: a reader never
// sees half a file, and a failure leaves what was there.
func (v *volumeFS) writeFile(rel string, r io.Reader, mode uint32, force bool) (volumeEntry, error) {
	if rel == "." {
		return volumeEntry{}, errorf(http.StatusConflict, "Path / is a directory")
	}
	dir, name, err := v.parent(rel)
	if err != nil {
		return volumeEntry{}, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return volumeEntry{}, errorf(http.StatusConflict, "Path %s is a directory", apiPath(rel))
	case err == nil && !force:
		return volumeEntry{}, errorf(http.StatusConflict, "Path %s already exists", apiPath(rel))
	case err != nil && !errors.Is(err, unix.ENOENT):
		return volumeEntry{}, pathError(rel, err)
	}
	// atomicfile: a locked temporary beside it (O_EXCL|O_NOFOLLOW, 0600
	// until it is whole), the mode as asked whatever the server's umask,
	// fsync, renamed (RENAME_NOREPLACE unless force), the directory
	// fsync'd; a killed upload's temporaries go with the next one into
	// that directory.
	o := uploadTemps
	o.NoReplace = !force
	_, _ = o.Clean(dir)
	f, err := atomicfile.CreateAt(dir, name, os.FileMode(mode), o)
	if err != nil {
		return volumeEntry{}, fmt.Errorf("creating the upload's file: %w", err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Abort()
		return volumeEntry{}, err
	}
	if err := f.Commit(); err != nil && !f.Renamed() {
		switch {
		case errors.Is(err, unix.EEXIST):
			return volumeEntry{}, errorf(http.StatusConflict, "Path %s already exists", apiPath(rel))
		case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY):
			return volumeEntry{}, errorf(http.StatusConflict, "Path %s is a directory", apiPath(rel))
		}
		return volumeEntry{}, pathError(rel, err)
	} else if err != nil {
		return volumeEntry{}, err
	}
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return volumeEntry{}, pathError(rel, err)
	}
	return v.entryOf(rel, &st), nil
}

// uploadTemps names the temporaries of uploads into a volume.
var uploadTemps = atomicfile.Options{Prefix: ".tent-upload-"}

// makeDir creates directory rel with mode; force creates its missing
// parents too (each with mode) and accepts a directory already there.
func (v *volumeFS) makeDir(rel string, mode uint32, force bool) (volumeEntry, error) {
	if rel == "." {
		if force {
			return v.stat(rel)
		}
		return volumeEntry{}, errorf(http.StatusConflict, "Path / already exists")
	}
	fd, err := unix.Dup(v.root)
	if err != nil {
		return volumeEntry{}, os.NewSyscallError("dup", err)
	}
	defer func() { unix.Close(fd) }()
	parts := strings.Split(rel, "/")
	for i, name := range parts {
		last := i == len(parts)-1
		sofar := strings.Join(parts[:i+1], "/")
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil && last && !force:
			unix.Close(next)
			return volumeEntry{}, errorf(http.StatusConflict, "Path %s already exists", apiPath(rel))
		case err == nil:
		case errors.Is(err, unix.ENOENT) && (last || force):
			if err := unix.Mkdirat(fd, name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
				return volumeEntry{}, pathError(sofar, err)
			}
			if next, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
				return volumeEntry{}, pathError(sofar, err)
			}
			// The mode as asked, whatever the umask, on the directory
			// opened (never through a name a sandbox could swap).
			if err := unix.Fchmod(next, mode); err != nil {
				unix.Close(next)
				return volumeEntry{}, os.NewSyscallError("fchmod", err)
			}
		case errors.Is(err, unix.ENOENT):
			return volumeEntry{}, errorf(http.StatusNotFound, "Path %s not found", apiPath(sofar))
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			// A file or a link where a directory is wanted.
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return volumeEntry{}, pathError(sofar, unix.ELOOP)
			}
			if last {
				return volumeEntry{}, errorf(http.StatusConflict, "Path %s already exists", apiPath(rel))
			}
			return volumeEntry{}, errorf(http.StatusConflict, "Path %s is not a directory", apiPath(sofar))
		default:
			return volumeEntry{}, pathError(sofar, err)
		}
		unix.Close(fd)
		fd = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return volumeEntry{}, os.NewSyscallError("fstat", err)
	}
	return v.entryOf(rel, &st), nil
}

// list describes directory rel's entries, depth levels down (1: its own).
func (v *volumeFS) list(rel string, depth int) ([]volumeEntry, error) {
	fd, err := v.openDir(rel)
	if err != nil {
		return nil, err
	}
	out := []volumeEntry{}
	size := 0
	err = v.listAt(fd, rel, depth, &out, &size)
	unix.Close(fd)
	return out, err
}

// listAt appends dir's (rel's) entries to out and, depth > 1, those of
// its subdirectories (never through a link). It closes nothing.
func (v *volumeFS) listAt(dir int, rel string, depth int, out *[]volumeEntry, size *int) error {
	dup, err := unix.Dup(dir)
	if err != nil {
		return os.NewSyscallError("dup", err)
	}
	f := os.NewFile(uintptr(dup), apiPath(rel))
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if len(*out) >= maxVolumeListEntries {
				return errorf(http.StatusBadRequest, "path %s: over %d entries: list a subdirectory, or with a smaller depth", apiPath(rel), maxVolumeListEntries)
			}
			child := path.Join(rel, name)
			var st unix.Stat_t
			if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone since it was read
			}
			e := v.entryOf(child, &st)
			if e.Type == "symlink" {
				e.Target = readlinkAt(dir, name)
			}
			// Deep paths are long: the answer is bounded in bytes too.
			if *size += jsonLen(e.Path) + jsonLen(e.Name) + jsonLen(e.Target) + volumeEntryOverhead; *size > maxVolumeListBytes {
				return errorf(http.StatusBadRequest, "path %s: the list is over %d MiB: list a subdirectory, or with a smaller depth", apiPath(rel), maxVolumeListBytes>>20)
			}
			*out = append(*out, e)
			if depth > 1 && e.Type == "directory" {
				sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue // replaced by something else since
				}
				err = v.listAt(sub, child, depth-1, out, size)
				unix.Close(sub)
				if err != nil {
					return err
				}
			}
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// setMode changes rel's mode: only a file's or a directory's, never
// through a link (transfer.ChmodNoFollow), which reaches an entry a sandbox
// left mode 0 (the server needs no permission on it).
func (v *volumeFS) setMode(rel string, mode *uint32) (volumeEntry, error) {
	dir, name := v.root, "."
	if rel != "." {
		pfd, n, err := v.parent(rel)
		if err != nil {
			return volumeEntry{}, err
		}
		defer unix.Close(pfd)
		dir, name = pfd, n
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return volumeEntry{}, pathError(rel, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return volumeEntry{}, errorf(http.StatusBadRequest, "path %s: only a file's or a directory's metadata can be changed", apiPath(rel))
	}
	if mode != nil {
		if err := transfer.ChmodNoFollow(dir, name, *mode); err != nil {
			return volumeEntry{}, pathError(rel, err)
		}
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return volumeEntry{}, pathError(rel, err)
		}
	}
	return v.entryOf(rel, &st), nil
}

// remove removes rel, a directory with everything beneath it (links are
// removed, never followed: transfer.RemoveBeneath, which also makes each
// directory a sandbox left mode 0 or read-only its owner's first). The
// root cannot be removed.
func (v *volumeFS) remove(rel string) error {
	if rel == "." {
		return errorf(http.StatusBadRequest, "path /: the volume's root cannot be removed (remove what is in it, or destroy the volume)")
	}
	dir, name, err := v.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathError(rel, err)
	}
	return removeError(transfer.RemoveBeneath(dir, name))
}

// removeError is the API's answer to a removal that stopped: a tree too
// deep to walk, or a directory a sandbox keeps filling, is a 409.
func removeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transfer.ErrTooDeep):
		return errorf(http.StatusConflict, "removal: directories nested over %d deep: remove them from a sandbox that mounts the volume (%v)", transfer.MaxDepth, err)
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return errorf(http.StatusConflict, "removal: a directory kept filling up (a sandbox is writing to it): %v", err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return errorf(http.StatusForbidden, "removal: %v", err)
	}
	return err
}

// removeAside removes a destroyed volume's directory, name in v.dir
// (the server's own path), without following what a sandbox left in it.
func (v *volumes) removeAside(name string) error {
	return removeError(transfer.RemoveTree(filepath.Join(v.dir, name)))
}
