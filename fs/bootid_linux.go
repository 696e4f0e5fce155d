package fs

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// bootIDPath is the kernel's boot id, a random UUID drawn at each boot.
const bootIDPath = "proc/sys/kernel/random/boot_id"

// privateBootID gives the sandbox a boot id of its own, drawn for this
// incarnation, as LXC does for containers: a file on a small tmpfs bound,
// read-only, over /proc/sys/kernel/random/boot_id. Programs that tell a
// restart by the boot id see one when a sandbox is provisioned again
// (a resume from a snapshot, a fork), and the host's, one of its
// identifiers, is not shown. A kernel without the file is left as it is,
// and so is a caller's root (Spec.Root) that has no room for the moment
// the tmpfs needs to be attached (before Linux 6.15 open_tree cannot
// clone from a detached mount, so the tmpfs is attached for a moment on a
// private directory of the new root, as stagedOverlay does).
func privateBootID(root int) error {
	fd, err := unix.Openat2(root, bootIDPath, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("openat2 /"+bootIDPath, err))
	}
	unix.Close(fd)
	tmp, err := newTmpfs(0o755)
	if err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	defer unix.Close(tmp)
	f, err := unix.Openat(tmp, "boot_id", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("openat", err))
	}
	_, err = unix.Write(f, []byte(newBootID()+"\n"))
	unix.Close(f)
	if err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("write", err))
	}
	const name = ".tent-bootid"
	if err := unix.Mkdirat(root, name, 0o700); err != nil {
		if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil // a caller's read-only root: the host's boot id stays
		}
		return fmt.Errorf("boot id: %w", os.NewSyscallError("mkdirat", err))
	}
	defer unix.Unlinkat(root, name, unix.AT_REMOVEDIR)
	dir, err := unix.Openat2(root, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveSafe})
	if err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("openat2", err))
	}
	defer unix.Close(dir)
	if err := unix.MoveMount(tmp, "", dir, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("move_mount", err))
	}
	// Detached again once the file is bound (the bind keeps the tmpfs).
	defer unix.Unmount(stage+"/"+name, unix.MNT_DETACH)
	file, err := unix.OpenTree(root, name+"/boot_id", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("open_tree", err))
	}
	defer unix.Close(file)
	if err := unix.MountSetattr(file, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("mount_setattr", err))
	}
	if err := unix.MoveMount(file, "", root, bootIDPath, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("boot id: %w", os.NewSyscallError("move_mount", err))
	}
	return nil
}

// newBootID draws a random (version 4) UUID in the kernel's format.
func newBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
