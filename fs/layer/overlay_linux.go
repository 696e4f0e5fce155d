//go:build linux

package layer

import (
	"fmt"
	iofs "io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// opaqueXattr marks an overlay directory that hides its lower
// counterpart (user.* in a user namespace: the userxattr option).
const opaqueXattr = "user.overlay.opaque"

// isOpaque reports whether the open directory fd is an opaque overlay
// directory.
func isOpaque(fd int) bool {
	buf := make([]byte, 4)
	n, err := unix.Fgetxattr(fd, opaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// regularFile is a regular file opened without following symlinks or
// blocking, with its fstat.
type regularFile struct {
	Fd int
	St unix.Stat_t
}

// Close closes the file's descriptor.
func (r *regularFile) Close() error { return unix.Close(r.Fd) }

// openRegular opens name in dirfd for reading only if it is a regular
// file: O_NOFOLLOW|O_NONBLOCK (a FIFO swapped in neither blocks nor is
// read), then fstat of the descriptor; anything else is errNotRegular.
func openRegular(dirfd int, name string) (*regularFile, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	r := &regularFile{Fd: fd}
	if err := unix.Fstat(fd, &r.St); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if !isRegStat(&r.St) {
		unix.Close(fd)
		return nil, errNotRegular
	}
	return r, nil
}

// errNotRegular is returned for a path that is not a regular file where
// one was expected (checked on the open descriptor).
var errNotRegular = fmt.Errorf("not a regular file: %w", unix.EINVAL)

// replaceAt makes room for a new entry name in dirfd: a file or symlink
// there is unlinked; a directory is an error (EEXIST), since the
// changes did not delete it.
func replaceAt(dirfd int, name, rel string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
		return &os.PathError{Op: "replace", Path: rel, Err: unix.EEXIST}
	}
	return &os.PathError{Op: "unlinkat", Path: rel, Err: err}
}

// isWhiteout reports an overlay whiteout (a 0/0 character device).
func isWhiteout(fi iofs.FileInfo) bool {
	if fi.Mode()&iofs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}
