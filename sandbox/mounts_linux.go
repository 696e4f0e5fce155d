package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

// openUserMounts opens the caller's mounts on the host, for a root caller
// whose sandbox (an unprivileged id) could not reach them. rw mounts are
// idmapped with the sandbox's own user namespace, so the directory's
// owner appears as the sandbox user and new files keep the owner's ids
// on disk.
func openUserMounts(mounts []fs.Mount, initPid int, uid, gid uint32) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	userns := -1
	for _, m := range mounts {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fds, invalid(fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("open_tree", err)))
		}
		fds = append(fds, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if m.Access == fs.CopyOnWrite {
			// The overlay's lower layer: never written, but its owner
			// must be the sandbox user's to be copied up.
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if !m.Writable() {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		} else {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return fds, os.NewSyscallError("fstat", err)
			}
			if st.Uid != uid {
				return fds, &UnsupportedError{Missing: []Missing{{
					Protection: string(m.Access) + " mount " + m.Source,
					Reason:     fmt.Sprintf("it is owned by uid %d but the sandbox user is uid %d; as root, tent maps the sandbox user onto the directory's owner with an idmapped mount", st.Uid, uid),
					Fix:        fmt.Sprintf("run with --user %d:%d, or chown the directory to uid %d", st.Uid, st.Gid, uid),
				}}}
			}
			if userns < 0 {
				if userns, err = unix.Open(fmt.Sprintf("/proc/%d/ns/user", initPid), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
					return fds, fmt.Errorf("opening the sandbox's user namespace: %w", err)
				}
				defer unix.Close(userns)
			}
			attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
			attr.Userns_fd = uint64(userns)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			if m.Writable() && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM)) {
				return fds, &UnsupportedError{Missing: []Missing{{
					Protection: string(m.Access) + " mount " + m.Source,
					Reason:     "the kernel or filesystem cannot idmap this mount: " + err.Error(),
					Fix:        "run tent as the (non-root) user who owns the directory, or mount it --ro",
				}}}
			}
			return fds, fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("mount_setattr", err))
		}
	}
	return fds, nil
}
