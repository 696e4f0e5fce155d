package fs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// newOverlay creates a detached overlay mount of s (in a user namespace:
// user.* xattrs, Linux 5.11). Its paths are resolved now, while the host
// view is intact; the lower directory, a caller's source, is opened
// without following symlinks (see OpenSource) and given to overlayfs as
// that descriptor.
func newOverlay(s Step, lower string) (int, error) {
	lfd, err := OpenSource(lower)
	if err != nil {
		return -1, err
	}
	defer unix.Close(lfd)
	named := map[string]string{"lowerdir": lower, "upperdir": s.Upper, "workdir": s.Work}
	lower = fmt.Sprintf("/proc/self/fd/%d", lfd)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("fsopen overlay", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"lowerdir", lower}, {"upperdir", s.Upper}, {"workdir", s.Work}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			if errors.Is(err, unix.EACCES) && kv[0] == "lowerdir" {
				return -1, fmt.Errorf("the sandbox's user cannot reach %s (a root caller's sandbox runs as an unprivileged id: run tent as the directory's owner, or mount it --rw): %w", named[kv[0]], os.NewSyscallError("fsconfig", err))
			}
			return -1, fmt.Errorf("overlay %s=%s: %w", kv[0], named[kv[0]], os.NewSyscallError("fsconfig", err))
		}
	}
	if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
		return -1, fmt.Errorf("overlay userxattr: %w", os.NewSyscallError("fsconfig", err))
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("creating the overlay (needs Linux 5.11 for overlays in a user namespace): %w", os.NewSyscallError("fsconfig", err))
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, os.NewSyscallError("fsmount overlay", err)
	}
	return fd, nil
}

// stagedOverlay builds an overlay whose lower layer is the detached
// mount lowerFD (an idmapped clone of the source, made by a root
// caller): overlayfs takes layers by path, so the clone is attached for a
// moment on a private directory of the new root, then detached again.
func stagedOverlay(root int, s Step, lowerFD int) (int, error) {
	name := ".tent-lower"
	if err := unix.Mkdirat(root, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, os.NewSyscallError("mkdirat", err)
	}
	defer unix.Unlinkat(root, name, unix.AT_REMOVEDIR)
	if err := unix.MoveMount(lowerFD, "", root, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return -1, fmt.Errorf("staging the lower layer: %w", os.NewSyscallError("move_mount", err))
	}
	staged := stage + "/" + name
	defer unix.Unmount(staged, unix.MNT_DETACH)
	fd, err := newOverlay(s, staged)
	if err != nil {
		return -1, fmt.Errorf("cow %s: %w", s.Target, err)
	}
	return fd, nil
}

func newTmpfs(mode uint32) (int, error) {
	return newFS("tmpfs", map[string]string{"mode": fmt.Sprintf("%o", mode)}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// newFS creates a detached mount of a new filesystem instance with the
// new mount API (fsopen, fsconfig, fsmount). An empty option value sets a
// flag.
func newFS(fstype string, opts map[string]string, attrs int) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("fsopen "+fstype, err)
	}
	defer unix.Close(fsfd)
	for k, v := range opts {
		if v == "" {
			err = unix.FsconfigSetFlag(fsfd, k)
		} else {
			err = unix.FsconfigSetString(fsfd, k, v)
		}
		if err != nil {
			return -1, fmt.Errorf("%s option %s: %w", fstype, k, os.NewSyscallError("fsconfig", err))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("creating %s: %w", fstype, os.NewSyscallError("fsconfig", err))
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return -1, os.NewSyscallError("fsmount "+fstype, err)
	}
	return fd, nil
}

// union mounts a read-only overlay of s.Lowers (directories beneath
// root, opened without following symlinks; the first on top) at
// s.Target beneath root.
func union(root int, s Step) error {
	var paths []string
	for _, l := range s.Lowers {
		fd, err := unix.Openat2(root, strings.TrimPrefix(l, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveSafe})
		if err != nil {
			return &os.PathError{Op: "openat2", Path: l, Err: err}
		}
		defer unix.Close(fd)
		paths = append(paths, fmt.Sprintf("/proc/self/fd/%d", fd))
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("fsopen overlay", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "lowerdir", strings.Join(paths, ":")); err != nil {
		return fmt.Errorf("overlay lowerdir=%s: %w", strings.Join(s.Lowers, ":"), os.NewSyscallError("fsconfig", err))
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("creating the overlay: %w", os.NewSyscallError("fsconfig", err))
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return os.NewSyscallError("fsmount overlay", err)
	}
	defer unix.Close(mnt)
	parent, name, err := mkdirParents(root, s.Target)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	return attach(mnt, parent, name, false)
}
