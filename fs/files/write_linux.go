package files

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
)

// WriteTemps names the temporaries the file helper's write and put make
// beside the file they replace (see internal/atomicfile); each write
// removes the ones a killed helper left in its file's directory.
var WriteTemps = atomicfile.Options{Prefix: ".tent-write-", Suffix: ".tmp"}

// maxSymlinks bounds the symlinks writeRegular follows, as the kernel's
// 40.
const maxSymlinks = 40

// writeRegular writes stdin to the regular file at path (symlinks
// followed, as the sandbox would), atomically: the data go to a
// temporary beside the file (atomicfile), which is renamed over it only
// once all of stdin is written and synced, so that a full disk or a
// killed helper leaves the old file, whole, or the new one. A new file
// gets mode (less the umask); an existing one keeps its permission bits,
// its owner and, with keepMeta, its metadata (MetadataXattrPrefix
// attributes); other extended attributes, and hard links to the old
// file, are not carried over.
//
// The file must be writable by the sandbox, as before: an existing one
// is opened for writing first. Where no temporary can replace it (its
// directory is not writable, its owner cannot be kept, it is a mount
// point), it is written in place through that descriptor, as tent did
// before.
func writeRegular(path string, mode os.FileMode, stdin io.Reader, keepMeta bool) error {
	target, err := finalPath(path)
	if err != nil {
		return err
	}
	// O_PATH: a directory the sandbox may write but not list will do.
	d, err := os.OpenFile(filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: errnoIn(err)}
	}
	defer d.Close()
	dirfd, name := int(d.Fd()), filepath.Base(target)
	o := WriteTemps
	perm := mode &^ umask()
	var meta map[string]string
	old, err := openExisting(dirfd, name, path)
	if err != nil {
		return err
	}
	if old != nil {
		defer old.Close()
		fi, err := old.Stat()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		perm = fi.Mode() & (os.ModePerm | os.ModeSticky)
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			o.Chown, o.UID, o.GID = true, int(st.Uid), int(st.Gid)
		}
		if keepMeta {
			meta = readMetadata(target)
		}
		if mountPoint(dirfd, int(old.Fd())) {
			return writeInPlace(old, stdin)
		}
	}
	_, _ = o.Clean(dirfd)
	f, err := atomicfile.CreateAt(dirfd, name, perm, o)
	if err != nil {
		// No temporary can replace it here (never for want of space:
		// in place, a full disk would cut the file short).
		if old != nil && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) ||
			errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOVERFLOW)) {
			return writeInPlace(old, stdin)
		}
		return &os.PathError{Op: "create", Path: path, Err: errnoIn(err)}
	}
	if _, err := io.Copy(f, stdin); err != nil {
		f.Abort()
		return err
	}
	for k, v := range meta {
		_ = unix.Fsetxattr(int(f.Fd()), MetadataXattrPrefix+k, []byte(v), 0)
	}
	if err := f.Commit(); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: errnoIn(err)}
	}
	return nil
}

// errnoIn is the errno inside err, for an error naming the caller's path
// rather than the temporary's.
func errnoIn(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// finalPath follows path's final symlinks (at most maxSymlinks), as
// open(2) would: a dangling one names the file to create.
func finalPath(path string) (string, error) {
	p := path
	for range maxSymlinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p, nil
		}
		link, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(p), link)
		}
		p = link
	}
	return "", &os.PathError{Op: "open", Path: path, Err: unix.ELOOP}
}

// openExisting opens the file name of dirfd for writing, without
// truncating it (the sandbox's right to write it is checked as before);
// nil when there is none. A directory is EISDIR, anything but a regular
// file EINVAL.
func openExisting(dirfd int, name, path string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case err != nil: // ELOOP: a symlink swapped in meanwhile
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%v is not a regular file: %w", fi.Mode().Type(), unix.EINVAL)}
	}
	return f, nil
}

// mountPoint reports whether the file fd is mounted on its own (a file
// bind-mounted over another), apart from the directory dirfd: a rename
// cannot replace it.
func mountPoint(dirfd, fd int) bool {
	var dst, fst unix.Statx_t
	if unix.Statx(dirfd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &dst) != nil ||
		unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &fst) != nil {
		return false
	}
	if fst.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && fst.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return true
	}
	return dst.Mask&fst.Mask&unix.STATX_MNT_ID != 0 && dst.Mnt_id != fst.Mnt_id
}

// writeInPlace truncates the open file f and writes stdin into it (not
// atomic: where no temporary can replace the file). A framed input cut
// short fails it (EPIPE), the file holding what came: never reported as
// written.
func writeInPlace(f *os.File, stdin io.Reader) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := io.Copy(f, stdin); err != nil {
		return err
	}
	return f.Close()
}

// umask is the process's file mode creation mask (from
// /proc/self/status; 022 when it cannot be read).
func umask() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & os.ModePerm
				}
			}
		}
	}
	return 0o022
}
