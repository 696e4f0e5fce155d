//go:build linux

package supervised

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The state directory is trusted only when it is the caller's.
//
// tent acts on what a record names: a supervisor's pid to wait for, a
// socket to hand the caller's stdio to, cow layers to delete, cgroups to
// thaw, kill and remove. Whoever can write the directory can plant such
// a record, so a state directory must be a real directory (not a
// symlink), owned by the caller's effective uid and writable by no one
// else (no group or other write bit): anything else is refused with
// [ErrUnsafeStateDir] before a record is read or written. Records are
// then checked again before each action: the socket is always the one
// beside the record (whatever the record says), cow layers are removed
// only at the shape tent gives them (TMPDIR/tent-cow-ID/N/upper, a real
// directory of the caller's or, for root, of the sandbox's host id), and
// cgroups only beneath /sys/fs/cgroup, named tent-*, on a cgroup
// filesystem.

// checkDir refuses a state directory that is a symlink, not a directory,
// not the caller's, or writable by group or others. A missing directory
// passes (there is nothing in it to trust).
func (s stateDir) checkDir() error {
	fi, err := os.Lstat(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return checkStateDirInfo(s.Dir, fi, os.Geteuid())
}

func checkStateDirInfo(dir string, fi os.FileInfo, euid int) error {
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symlink: give the directory itself (--state-dir $(realpath %s))", ErrUnsafeStateDir, dir, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeStateDir, dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner information", ErrUnsafeStateDir, dir)
	}
	if int(st.Uid) != euid {
		return fmt.Errorf("%w: %s belongs to uid %d, not to you (uid %d): tent acts on the records in it (pids, sockets, directories to delete), so it must be yours; use a state directory of your own (--state-dir or TENT_STATE_DIR)",
			ErrUnsafeStateDir, dir, st.Uid, euid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by others (mode %04o): anyone who can write it can plant records that tent acts on; chmod go-w %s",
			ErrUnsafeStateDir, dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// validID reports whether id has the form NewID gives: 16 lowercase hex
// digits. Records, sockets and logs are named after it.
func validID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// cowRootOf returns the cow root (TMPDIR/tent-cow-ID) that a recorded
// upper directory (ROOT/N/upper) belongs to, if the path has exactly that
// shape and the root is a real directory owned by the caller or, for a
// root caller, by the sandbox's unprivileged host id (see makeLayers).
func cowRootOf(upper string, euid int) (string, bool) {
	if !filepath.IsAbs(upper) || filepath.Clean(upper) != upper || filepath.Base(upper) != "upper" {
		return "", false
	}
	n := filepath.Dir(upper)
	if _, err := strconv.Atoi(filepath.Base(n)); err != nil {
		return "", false
	}
	root := filepath.Dir(n)
	if !validID(strings.TrimPrefix(filepath.Base(root), "tent-cow-")) || !strings.HasPrefix(filepath.Base(root), "tent-cow-") {
		return "", false
	}
	fi, err := os.Lstat(root)
	if err != nil || !fi.IsDir() {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (int(st.Uid) != euid && !(euid == 0 && st.Uid == nobodyID)) {
		return "", false
	}
	return root, true
}

// cgroupRoot is where tent's cgroups live, on every hierarchy.
const cgroupRoot = "/sys/fs/cgroup/"

// validCgroupDir reports whether a recorded cgroup directory is one tent
// may thaw, kill and remove: a clean path beneath /sys/fs/cgroup whose
// last element is tent-*, on a cgroup (v1 or v2) filesystem.
func validCgroupDir(dir string) bool {
	if filepath.Clean(dir) != dir || !strings.HasPrefix(dir, cgroupRoot) || !strings.HasPrefix(filepath.Base(dir), "tent-") {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}
