package atomicfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// rename renames tmp over name, both in dirfd (renameat2; with
// noReplace, RENAME_NOREPLACE: an existing name fails with EEXIST).
func rename(dirfd int, tmp, name string, noReplace bool) error {
	var flags uint
	if noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(dirfd, tmp, dirfd, name, flags); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: name, Err: err}
	}
	return nil
}

// Dir is a temporary directory being filled, to be renamed into place by
// Commit or removed by Abort. It is locked as a [File] is, so that
// [Options.Clean] removes it only once its writer is gone.
type Dir struct {
	f     *os.File // the directory, open and locked
	dirfd int
	tmp   string
	o     Options
	done  bool
}

// MkdirAt creates a temporary directory (mode 0700) of o's pattern in
// the directory dirfd, which the caller holds open until Commit or Abort.
func MkdirAt(dirfd int, o Options) (*Dir, error) {
	for try := 0; ; try++ {
		tmp := o.TempName()
		err := unix.Mkdirat(dirfd, tmp, 0o700)
		if errors.Is(err, unix.EEXIST) && try < 16 {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "mkdir", Path: tmp, Err: err}
		}
		fd, err := unix.Openat(dirfd, tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = unix.Unlinkat(dirfd, tmp, unix.AT_REMOVEDIR)
			return nil, &os.PathError{Op: "open", Path: tmp, Err: err}
		}
		f := os.NewFile(uintptr(fd), tmp)
		held, err := lockCreated(dirfd, fd, tmp)
		if err != nil || !held {
			f.Close()
			if err != nil {
				_ = unix.Unlinkat(dirfd, tmp, unix.AT_REMOVEDIR)
				return nil, err
			}
			if try < 16 {
				continue
			}
			return nil, &os.PathError{Op: "lock", Path: tmp, Err: unix.EAGAIN}
		}
		return &Dir{f: f, dirfd: dirfd, tmp: tmp, o: o}, nil
	}
}

// Name is the temporary directory's name in its parent.
func (d *Dir) Name() string { return d.tmp }

// Fd is the temporary directory's descriptor.
func (d *Dir) Fd() int { return int(d.f.Fd()) }

// Commit gives the directory perm, syncs it and renames it to name (with
// the options' NoReplace), then syncs its parent. On an error before the
// rename the directory and all it holds are removed.
func (d *Dir) Commit(name string, perm os.FileMode) error {
	if d.done {
		return &os.PathError{Op: "commit", Path: name, Err: os.ErrClosed}
	}
	err := d.f.Chmod(perm)
	if err == nil {
		err = d.f.Sync()
	}
	if err == nil {
		err = rename(d.dirfd, d.tmp, name, d.o.NoReplace)
	}
	if err != nil {
		d.Abort()
		return err
	}
	d.done = true
	err = SyncDir(d.dirfd)
	d.f.Close()
	return err
}

// Abort removes the temporary directory and everything in it.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	_ = removeTree(d.dirfd, d.tmp, int(d.f.Fd()))
	d.f.Close()
}

// removeStaleDir removes the temporary directory name of dirfd (st its
// lstat) with its contents, when nobody holds it locked.
func removeStaleDir(dirfd int, name string, st *unix.Stat_t) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var held unix.Stat_t
	if unix.Fstat(fd, &held) != nil || !sameFile(st, &held) {
		return false
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false
	}
	var now unix.Stat_t
	if unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW) != nil || !sameFile(&now, &held) {
		return false
	}
	return removeTree(dirfd, name, fd) == nil
}

// removeTree removes the directory name of dirfd, open as fd, and
// everything beneath it, never following a symlink out of it (os.Root).
func removeTree(dirfd int, name string, fd int) error {
	root, err := os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	d, err := root.Open(".")
	if err != nil {
		root.Close()
		return err
	}
	var errs []error
	for {
		names, rerr := d.Readdirnames(1024)
		for _, n := range names {
			errs = append(errs, root.RemoveAll(n))
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	d.Close()
	root.Close()
	errs = append(errs, unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
	return errors.Join(errs...)
}

// PlaceAt puts an entry that cannot be written and locked as a [File]
// can (a symlink, a FIFO) in place of name in the directory dirfd, as one
// step: mk makes it as name in a temporary directory of o's pattern
// (locked, see [MkdirAt]), from which it is renamed over name (with o's
// NoReplace); the temporary directory is removed. A writer killed
// meanwhile leaves that directory, which [Options.Clean] with Dirs
// removes.
func PlaceAt(dirfd int, name string, o Options, mk func(dirfd int, name string) error) error {
	d, err := MkdirAt(dirfd, o)
	if err != nil {
		return err
	}
	defer d.Abort()
	const entry = "entry"
	if err := mk(d.Fd(), entry); err != nil {
		return err
	}
	var flags uint
	if o.NoReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(d.Fd(), entry, dirfd, name, flags); err != nil {
		return &os.LinkError{Op: "rename", Old: d.tmp + "/" + entry, New: name, Err: err}
	}
	return SyncDir(dirfd)
}
