package fs

import (
	"os"

	"golang.org/x/sys/unix"
)

// MakePrivate makes the detached mount tree fd (from open_tree with
// OPEN_TREE_CLONE) private, each of its mounts. A clone of a shared mount
// is a peer of its source, and a clone of a slave mount a slave of the
// same master: without this, what the sandbox mounts beneath it (its
// /proc, /dev, masks) would propagate to the host's mount table, where
// it stays after the sandbox ends, the host's new mounts beneath the
// source would appear in the sandbox, and pivot_root refuses a new root
// that is shared (a bundle's rootfs bind-mounted on itself under a
// shared /, as on every systemd host). Call it where the clone is made,
// by whoever may change it: the host side for the descriptors it passes.
func MakePrivate(fd int) error {
	return setPropagation(fd, false)
}

// setPropagation makes the detached mount tree fd private, or, with
// slave, a recursive slave of its source's peer group (private where the
// source is not shared): see [Mount].Slave.
func setPropagation(fd int, slave bool) error {
	if slave {
		attr := unix.MountAttr{Propagation: unix.MS_SLAVE}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return os.NewSyscallError("mount_setattr(MS_SLAVE)", err)
		}
		return nil
	}
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return os.NewSyscallError("mount_setattr(MS_PRIVATE)", err)
	}
	return nil
}
