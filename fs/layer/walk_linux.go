package layer

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxDepth is how many directory levels below its root the host-side
// tree code (Diff, ApplyChanges, WriteTar, ExtractTar, RemoveTree) walks.
// A deeper tree fails with an error that wraps ErrTooDeep and names the
// path where the bound was hit. The walks are descriptor-relative, so a
// tree deeper than PATH_MAX allows by path still works up to this depth;
// each level holds one directory descriptor open while it is walked
// (Go raises the soft RLIMIT_NOFILE to the hard limit at start-up, which
// leaves ample room on any ordinary system).
const MaxDepth = 4096

// ErrTooDeep is wrapped by the errors of walks that reach MaxDepth.
var ErrTooDeep = errors.New("directory tree deeper than layer.MaxDepth levels")

// resolveSafe refuses every symlink, magic link and escape from dirfd.
const resolveSafe = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens name beneath dirfd refusing every symlink, magic
// link and escape (resolveSafe). openat2 may answer EAGAIN when a rename
// races its lookup; that is retried a bounded number of times. Where
// openat2 is unavailable (ENOSYS: inside a sandbox, whose seccomp profile
// denies it, or before Linux 5.6), a single plain component is opened
// with openat and O_NOFOLLOW, which is the same check for one component;
// a path of several is refused.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveSafe}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 64 {
			continue
		}
		if err == unix.ENOSYS && name != "." && name != ".." && !strings.Contains(name, "/") {
			fd, err = unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == unix.ENOTDIR || err == unix.ELOOP {
				// As openat2 says it: ELOOP for a symlink.
				if st, serr := lstatAt(dirfd, name); serr == nil && isLinkStat(&st) {
					err = unix.ELOOP
				}
			}
		}
		return fd, err
	}
}

// openDir opens the directory name beneath dirfd for reading, refusing
// symlinks (ELOOP: RESOLVE_NO_SYMLINKS, also for the last component) and
// non-directories (ENOTDIR).
func openDir(dirfd int, name string) (int, error) {
	return openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
}

// openRootDir opens a host-chosen directory path (the root of a walk).
// Only its last component is not followed: the path is the caller's.
func openRootDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// lstatAt is fstatat without following a final symlink.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// readlinkAt reads the target of the symlink name in dirfd.
func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

// readNames lists the directory dirfd, sorted, without "." and "..".
func readNames(dirfd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		unix.Close(dup)
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, unwrapErrno(err)
	}
	sort.Strings(names)
	return names, nil
}

// unwrapErrno returns the errno inside an *os.PathError or
// *os.SyscallError, so that callers wrap it once with their own path.
func unwrapErrno(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func isDirStat(st *unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isLinkStat(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }
func isRegStat(st *unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFREG }

// isWhiteoutStat reports an overlay whiteout: a 0/0 character device.
func isWhiteoutStat(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// joinRel joins slash-separated relative paths.
func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// splitRel splits a slash-separated relative path into its components,
// refusing absolute paths and empty, "." and ".." components.
func splitRel(p string) ([]string, error) {
	comps := strings.Split(p, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("path %q is not a plain relative path: %w", p, unix.EINVAL)
		}
	}
	if len(comps) > MaxDepth {
		return nil, fmt.Errorf("path %q: %w", p, ErrTooDeep)
	}
	return comps, nil
}

// dirCursor opens the directories of a sequence of paths below one root
// descriptor, one component at a time with resolveSafe, keeping the open
// chain of the last path: walking a tree in order costs one openat2 per
// directory however deep it is.
type dirCursor struct {
	Root   int
	Create bool // create missing directories (mode 0755, before umask)
	names  []string
	fds    []int
}

// Dir returns the descriptor of the directory at comps (the root for
// none), owned by the cursor: valid until the next call or Close.
func (c *dirCursor) Dir(comps []string) (int, error) {
	if len(comps) > MaxDepth {
		return -1, fmt.Errorf("%s: %w", strings.Join(comps, "/"), ErrTooDeep)
	}
	k := 0
	for k < len(comps) && k < len(c.names) && comps[k] == c.names[k] {
		k++
	}
	c.truncate(k)
	for i := k; i < len(comps); i++ {
		parent := c.Root
		if i > 0 {
			parent = c.fds[i-1]
		}
		if c.Create {
			if err := unix.Mkdirat(parent, comps[i], 0o755); err != nil && err != unix.EEXIST {
				return -1, &os.PathError{Op: "mkdirat", Path: strings.Join(comps[:i+1], "/"), Err: err}
			}
		}
		fd, err := openDir(parent, comps[i])
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: strings.Join(comps[:i+1], "/"), Err: err}
		}
		c.names = append(c.names, comps[i])
		c.fds = append(c.fds, fd)
	}
	if len(comps) == 0 {
		return c.Root, nil
	}
	return c.fds[len(comps)-1], nil
}

func (c *dirCursor) truncate(k int) {
	for _, fd := range c.fds[k:] {
		unix.Close(fd)
	}
	c.names, c.fds = c.names[:k], c.fds[:k]
}

func (c *dirCursor) Close() { c.truncate(0) }

// removeAt removes name from the directory parent and, for a directory,
// everything beneath it, descriptor-relative: a symlink is removed as a
// link, never traversed. fixPerm makes directories searchable and
// writable first (overlay leaves work/work with mode 000). rel names the
// entry in errors; depth is its depth below the walk's root.
func removeAt(parent int, name, rel string, depth int, fixPerm bool) error {
	st, err := lstatAt(parent, name)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "fstatat", Path: rel, Err: err}
	}
	if !isDirStat(&st) {
		if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
			return &os.PathError{Op: "unlinkat", Path: rel, Err: err}
		}
		return nil
	}
	if depth >= MaxDepth {
		return fmt.Errorf("%s: %w", rel, ErrTooDeep)
	}
	fd, err := openDir(parent, name)
	if fixPerm && err == unix.EACCES {
		// A directory without search permission: the caller owns it.
		if perr := chmodNoFollow(parent, name, 0o700); perr == nil {
			fd, err = openDir(parent, name)
		}
	}
	switch err {
	case nil:
	case unix.ENOENT:
		return nil
	case unix.ELOOP, unix.ENOTDIR: // replaced meanwhile by a link or a file
		return removeAt(parent, name, rel, depth, fixPerm)
	default:
		return &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	if fixPerm {
		_ = unix.Fchmod(fd, 0o700)
	}
	names, err := readNames(fd)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: rel, Err: err}
	}
	for _, n := range names {
		if err := removeAt(fd, n, joinRel(rel, n), depth+1, fixPerm); err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: rel, Err: err}
	}
	return nil
}

// RemoveTree removes dir and everything beneath it without following
// any symlink inside it (each is removed as a link), descriptor-relative
// so that trees deeper than PATH_MAX go too (up to MaxDepth levels), and
// makes directories searchable and writable as needed. Use it for host
// directories whose contents a sandbox controlled (its cow layers). dir
// itself is the caller's path; a missing dir is not an error.
func RemoveTree(dir string) error {
	dir = strings.TrimRight(dir, "/")
	if dir == "" {
		return &os.PathError{Op: "remove", Path: "/", Err: unix.EINVAL}
	}
	parent, name := "/", dir
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		parent, name = dir[:i], dir[i+1:]
		if parent == "" {
			parent = "/"
		}
	} else {
		parent = "."
	}
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: parent, Err: err}
	}
	defer unix.Close(pfd)
	if err := removeAt(pfd, name, dir, 0, true); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// RemoveBeneath is RemoveTree for name in the directory parent, a
// descriptor the caller resolved safely: for a tree inside a directory a
// sandbox still writes to (a volume), where no path may be trusted. The
// caller checks that name exists, if that matters (a missing one is not
// an error); a tree deeper than MaxDepth wraps ErrTooDeep.
func RemoveBeneath(parent int, name string) error {
	return removeAt(parent, name, name, 0, true)
}

// ChmodNoFollow sets the mode of name in the directory parent without
// following a symlink (a link is refused with ELOOP), on any kernel: see
// chmodNoFollow.
func ChmodNoFollow(parent int, name string, mode uint32) error {
	return chmodNoFollow(parent, name, mode)
}

// chmodNoFollow sets the mode of name in parent, never through a symlink:
// fchmodat2(AT_SYMLINK_NOFOLLOW) where the kernel has it (Linux 6.6),
// else an O_PATH descriptor opened without following symlinks and chmod
// of its /proc/self/fd link, which names that very inode (an O_PATH open
// needs no permission on the file itself, only search on its parent).
func chmodNoFollow(parent int, name string, mode uint32) error {
	err := unix.Fchmodat(parent, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if err != unix.EOPNOTSUPP && err != unix.ENOSYS {
		return err
	}
	return chmodOPath(parent, name, mode)
}

// chmodOPath is chmodNoFollow's way before Linux 6.6.
func chmodOPath(parent int, name string, mode uint32) error {
	fd, err := openBeneath(parent, name, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// O_PATH|O_NOFOLLOW opens a final symlink itself: refuse it as
	// openat2 refuses symlinks elsewhere.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if isLinkStat(&st) {
		return unix.ELOOP
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}
