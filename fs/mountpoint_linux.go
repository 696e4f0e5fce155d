package fs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// attach creates name under parent (a directory, or an empty file when
// file is set) without following symlinks and moves mnt onto it. An
// existing file is mounted over as it is, as docker -v does: a file of a
// read-only system directory (/etc/hosts, /etc/resolv.conf, a CA bundle)
// needs no write access to be a mount point. An existing symlink is
// refused, never followed.
func attach(mnt, parent int, name string, file bool) error {
	if file {
		if err := fileMountpoint(parent, name); err != nil {
			return err
		}
	} else if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating the mount point: %w", os.NewSyscallError("mkdirat", err))
	}
	target, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if err != nil {
		return fmt.Errorf("opening the mount point: %w", os.NewSyscallError("openat2", err))
	}
	defer unix.Close(target)
	if err := unix.MoveMount(mnt, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return os.NewSyscallError("move_mount", err)
	}
	return nil
}

// fileMountpoint makes sure name under parent is a regular file to mount
// a file over: an existing one is taken as it is (without opening it for
// writing, which a read-only directory refuses), a missing one is created
// empty; anything else (a directory, a symlink, a device) is refused.
func fileMountpoint(parent int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			return nil
		case unix.S_IFDIR:
			return errors.New("the mount point is a directory: a file can only be mounted over a file")
		case unix.S_IFLNK:
			return errors.New("the mount point is a symlink, which tent never follows: mount over the path it points to instead (created if missing)")
		}
		return errors.New("the mount point is not a regular file: a file can only be mounted over a file")
	}
	if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("the mount point: %w", os.NewSyscallError("fstatat", err))
	}
	fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("creating the mount point: %w", os.NewSyscallError("openat", err))
	}
	unix.Close(fd)
	return nil
}

// mkdirParents opens (creating as needed) the parent directory of target
// beneath root, one component at a time, refusing symlinks. It returns
// the parent's descriptor and the last component.
func mkdirParents(root int, target string) (int, string, error) {
	dir, name := path.Split(target)
	fd, err := unix.Openat2(root, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveSafe})
	if err != nil {
		return -1, "", os.NewSyscallError("openat2", err)
	}
	for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
		if c == "" {
			continue
		}
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return -1, "", fmt.Errorf("creating %s: %w", c, os.NewSyscallError("mkdirat", err))
		}
		next, err := unix.Openat2(fd, c, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveSafe})
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("opening %s: %w", c, os.NewSyscallError("openat2", err))
		}
		fd = next
	}
	return fd, name, nil
}

// MakeMountPoints creates, in the host directory root (a caller's root,
// [PlanInput].Root), the mount points of p's steps that lie directly in
// that root's tree (not beneath another step's mount), when missing: a
// directory, or an empty file for a bind of a file. It is for a caller
// on the host who may write root where the sandbox cannot (a read-only
// root, or one whose owner the sandbox's user namespace does not map),
// as runc creates a bundle's mount points. Every path is created
// beneath root one component at a time without following symlinks
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a symlink the root's
// tree holds fails with ELOOP, never leads out. Optional steps, masks
// and read-only paths get none.
func MakeMountPoints(root string, p *Plan) error {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	var mounted []string
	for _, s := range p.Steps {
		switch s.Kind {
		case KindRoot, KindMask, KindReadOnly, KindSymlink:
			continue
		}
		if s.Optional || beneathAny(path.Dir(s.Target), mounted) {
			mounted = append(mounted, s.Target)
			continue
		}
		mounted = append(mounted, s.Target)
		file := false
		if s.Kind == KindBind && s.Source != "" {
			if fi, err := os.Stat(s.Source); err == nil && !fi.IsDir() {
				file = true
			}
		}
		parent, name, err := mkdirParents(rfd, s.Target)
		if err != nil {
			return fmt.Errorf("mount point %s in %s: %w", s.Target, root, err)
		}
		if file {
			var fd int
			fd, err = unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
		} else {
			err = unix.Mkdirat(parent, name, 0o755)
		}
		unix.Close(parent)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mount point %s in %s: %w", s.Target, root, os.NewSyscallError("create", err))
		}
	}
	return nil
}
