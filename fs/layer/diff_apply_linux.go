//go:build linux

package layer

import (
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
)

// ApplyChanges makes dst match the upper layer's changes: added and
// modified files, symlinks and FIFOs are copied from upper (regular
// files with their permission bits, never setuid/setgid, and their holes
// kept), directories created, deleted paths removed. Sockets and device
// nodes are not exported (the entry in dst is removed).
//
// Both trees are reached descriptor-relative, one component at a time,
// refusing symlinks on the way (openat2 RESOLVE_BENEATH|NO_SYMLINKS|
// NO_MAGICLINKS): deletions come first, each done with unlinkat in its
// parent, so a symlink in place of a directory is removed as a link and
// never traversed, and a deletion beneath a symlink or non-directory of
// dst is a no-op; a symlink met on the way to a path being written, in
// dst or upper (one the sandbox swapped in meanwhile), fails the export
// with ELOOP naming the path. Regular files are opened O_NOFOLLOW|
// O_NONBLOCK and checked by fstat, and copied up to the size fstat gave.
// Changes whose upper entry vanished meanwhile are skipped.
func ApplyChanges(dst, upper string, changes []Change) error {
	comps := make([][]string, len(changes))
	for i, c := range changes {
		var err error
		if comps[i], err = splitRel(c.Path); err != nil {
			return fmt.Errorf("export to %s: %w", dst, err)
		}
	}
	dfd, err := openRootDir(dst)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	ufd, err := openRootDir(upper)
	if err != nil {
		return err
	}
	defer unix.Close(ufd)

	del := &dirCursor{Root: dfd}
	for i, c := range changes {
		if c.Kind != Deleted {
			continue
		}
		cs := comps[i]
		pfd, err := del.Dir(cs[:len(cs)-1])
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue
		}
		if err != nil {
			del.Close()
			return fmt.Errorf("export to %s: %w", dst, err)
		}
		if err := removeAt(pfd, cs[len(cs)-1], c.Path, len(cs)-1, false); err != nil {
			del.Close()
			return fmt.Errorf("export to %s: %w", dst, err)
		}
	}
	del.Close()

	w := &dirCursor{Root: dfd, Create: true}
	defer w.Close()
	r := &dirCursor{Root: ufd}
	defer r.Close()
	cleaned := map[string]bool{}
	for i, c := range changes {
		if c.Kind == Deleted {
			continue
		}
		if err := applyOne(w, r, comps[i], c.Path, cleaned); err != nil {
			return fmt.Errorf("export of %s to %s: %w", upper, dst, err)
		}
	}
	return nil
}

// applyOne copies the upper entry at comps (rel) into dst. The first
// time it writes into a directory of dst (cleaned records which), it
// removes the temporaries a killed export left there.
func applyOne(w, r *dirCursor, comps []string, rel string, cleaned map[string]bool) error {
	parent, name := comps[:len(comps)-1], comps[len(comps)-1]
	ufd, err := r.Dir(parent)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := lstatAt(ufd, name)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "fstatat", Path: rel, Err: err}
	}
	dfd, err := w.Dir(parent)
	if err != nil {
		return err
	}
	if key := path.Join(parent...); !cleaned[key] {
		cleaned[key] = true
		_, _ = ExportTemps.Clean(dfd)
	}
	perm := uint32(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err := unix.Mkdirat(dfd, name, perm)
		if err == unix.EEXIST {
			if est, serr := lstatAt(dfd, name); serr == nil && isDirStat(&est) {
				return nil
			}
			if err = replaceAt(dfd, name, rel); err == nil {
				err = unix.Mkdirat(dfd, name, perm)
			}
		}
		if err != nil {
			return &os.PathError{Op: "mkdirat", Path: rel, Err: err}
		}
	case unix.S_IFLNK:
		target, err := readlinkAt(ufd, name)
		if err != nil {
			return &os.PathError{Op: "readlinkat", Path: rel, Err: err}
		}
		// Made beside it and renamed over it: the old file stays until
		// the link exists.
		return placeOver(dfd, name, rel, func(d int, n string) error {
			if err := unix.Symlinkat(target, d, n); err != nil {
				return &os.PathError{Op: "symlinkat", Path: rel, Err: err}
			}
			return nil
		})
	case unix.S_IFREG:
		return copyFile(ufd, dfd, name, rel, perm)
	case unix.S_IFIFO:
		return placeOver(dfd, name, rel, func(d int, n string) error {
			if err := unix.Mkfifoat(d, n, perm); err != nil {
				return &os.PathError{Op: "mkfifoat", Path: rel, Err: err}
			}
			return nil
		})
	default: // sockets, devices, whiteouts: not exported
		return replaceAt(dfd, name, rel)
	}
	return nil
}

// ExportTemps names the temporaries an export writes beside the files it
// replaces (see internal/atomicfile): files, and directories a symlink or
// a FIFO is made in before it is renamed into place. An export removes
// the ones a killed export left in the directories it writes into.
var ExportTemps = atomicfile.Options{Prefix: ".tent-export-", Suffix: ".tmp", Dirs: true}

// notDirAt fails with EEXIST (the changes did not delete it) when name
// in dirfd is a directory: a file does not replace one.
func notDirAt(dirfd int, name, rel string) error {
	if st, err := lstatAt(dirfd, name); err == nil && isDirStat(&st) {
		return &os.PathError{Op: "replace", Path: rel, Err: unix.EEXIST}
	}
	return nil
}

// placeOver puts the entry mk makes (a symlink, a FIFO) in place of
// name in dirfd as one step (atomicfile.PlaceAt: made in a locked
// temporary directory, renamed over name); a directory there is EEXIST,
// since the changes did not delete it.
func placeOver(dirfd int, name, rel string, mk func(dirfd int, name string) error) error {
	err := atomicfile.PlaceAt(dirfd, name, ExportTemps, mk)
	var le *os.LinkError
	if errors.As(err, &le) {
		if le.Err == unix.EISDIR || le.Err == unix.ENOTEMPTY || le.Err == unix.EEXIST {
			return &os.PathError{Op: "replace", Path: rel, Err: unix.EEXIST}
		}
		return &os.PathError{Op: "rename", Path: rel, Err: le.Err}
	}
	return err
}

// copyFile copies the regular file name of srcDir into dstDir with perm,
// holes kept, atomically: written whole to a temporary beside it
// (atomicfile), fsync'd and renamed over it, so that a full disk or a
// kill leaves the old file, whole, with its mode, or the new one.
func copyFile(srcDir, dstDir int, name, rel string, perm uint32) error {
	in, err := openRegular(srcDir, name)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer in.Close()
	if err := notDirAt(dstDir, name, rel); err != nil {
		return err
	}
	out, err := atomicfile.CreateAt(dstDir, name, os.FileMode(perm), ExportTemps)
	if err != nil {
		return &os.PathError{Op: "create", Path: rel, Err: err}
	}
	if err := copyRegular(int(out.Fd()), in.Fd, in.St.Size); err != nil {
		out.Abort()
		return &os.PathError{Op: "copy", Path: rel, Err: err}
	}
	if err := out.Commit(); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) && (le.Err == unix.EISDIR || le.Err == unix.ENOTEMPTY || le.Err == unix.EEXIST) {
			return &os.PathError{Op: "replace", Path: rel, Err: unix.EEXIST}
		}
		return &os.PathError{Op: "copy", Path: rel, Err: err}
	}
	return nil
}
