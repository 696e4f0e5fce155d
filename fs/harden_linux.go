package fs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// protectProc makes the procfs entries that configure the host kernel
// read-only, as bubblewrap does, and gives the sandbox a boot id of its
// own (see privateBootID).
func protectProc(root int) error {
	for _, p := range []string{"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"} {
		err := setReadOnly(root, "/"+p)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return err
		}
	}
	return privateBootID(root)
}

// setReadOnly bind-mounts target onto itself read-only (non-recursive).
func setReadOnly(root int, target string) error {
	rel := strings.TrimPrefix(target, "/")
	fd, err := unix.OpenTree(root, rel, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("open_tree", err))
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("mount_setattr", err))
	}
	if err := unix.MoveMount(fd, "", root, rel, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("move_mount", err))
	}
	return nil
}

// sealMount makes the mount at target read-only in place, leaving the
// mounts beneath it (for /dev: the nodes, pts and shm) as they are.
func sealMount(root int, target string) error {
	fd, err := unix.Openat2(root, strings.TrimPrefix(target, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("openat2", err))
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("mount_setattr", err))
	}
	return nil
}

// mask hides target beneath root, when it exists: a directory under an
// empty read-only tmpfs, anything else under null (a detached clone of
// /dev/null), read-only. The target is opened without following
// symlinks.
func mask(root int, target string, null int) error {
	fd, err := unix.Openat2(root, strings.TrimPrefix(target, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", target, os.NewSyscallError("openat2", err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mask %s: %w", target, os.NewSyscallError("fstat", err))
	}
	src := null
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if src, err = newFS("tmpfs", map[string]string{"mode": "0555"}, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return fmt.Errorf("mask %s: %w", target, err)
		}
		defer unix.Close(src)
	} else {
		if src, err = unix.OpenTree(null, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("mask %s: %w", target, os.NewSyscallError("open_tree", err))
		}
		defer unix.Close(src)
		if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
			return fmt.Errorf("mask %s: %w", target, os.NewSyscallError("mount_setattr", err))
		}
	}
	if err := unix.MoveMount(src, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mask %s: %w", target, os.NewSyscallError("move_mount", err))
	}
	return nil
}

// readOnlyBeneath binds target (beneath root, opened without following
// symlinks; left alone when missing) onto itself read-only, nosuid,
// nodev and noexec, with what is mounted beneath it.
func readOnlyBeneath(root int, target string) error {
	fd, err := unix.Openat2(root, strings.TrimPrefix(target, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("openat2", err))
	}
	defer unix.Close(fd)
	clone, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("open_tree", err))
	}
	defer unix.Close(clone)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(clone, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("mount_setattr", err))
	}
	if err := unix.MoveMount(clone, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("read-only %s: %w", target, os.NewSyscallError("move_mount", err))
	}
	return nil
}
