//go:build !linux

package atomicfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// rename renames tmp over name, both in dirfd; with noReplace an
// existing name fails with EEXIST (checked first: not atomic here).
func rename(dirfd int, tmp, name string, noReplace bool) error {
	if noReplace {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			return &os.LinkError{Op: "rename", Old: tmp, New: name, Err: unix.EEXIST}
		}
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: name, Err: err}
	}
	return nil
}

// removeStaleDir leaves directories alone outside Linux.
func removeStaleDir(int, string, *unix.Stat_t) bool { return false }
