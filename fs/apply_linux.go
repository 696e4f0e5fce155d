package fs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// stage is where the new root is attached before pivot_root. Sources are
// opened before it is covered, so hiding the host's /tmp is harmless.
const stage = "/tmp"

// resolveSafe refuses every symlink, magic link and escape from dirfd.
const resolveSafe = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Apply builds the plan in the calling process's mount namespace and
// pivots into it. pre holds detached mounts (from open_tree) for steps
// whose FD is set. The caller must hold CAP_SYS_ADMIN in the user
// namespace owning its (private) mount namespace.
func (p *Plan) Apply(pre []int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", os.NewSyscallError("mount", err))
	}
	// Open every bind source first, while the host view is intact.
	srcs := make([]int, len(p.Steps))
	defer func() {
		for _, fd := range srcs {
			if fd > 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, s := range p.Steps {
		if s.Kind == KindOverlay {
			if s.FD >= 0 { // lower layer from the host: staged in applyStep
				fd, err := openSource(s, pre)
				if err != nil {
					return err
				}
				srcs[i] = fd
				// The layers' host paths are covered once the new root is
				// staged: keep them as descriptors.
				for _, dir := range []*string{&p.Steps[i].Upper, &p.Steps[i].Work} {
					dfd, err := unix.Open(*dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
					if err != nil {
						return fmt.Errorf("cow %s: %w", s.Target, &os.PathError{Op: "open", Path: *dir, Err: err})
					}
					defer unix.Close(dfd)
					*dir = fmt.Sprintf("/proc/self/fd/%d", dfd)
				}
				continue
			}
			fd, err := newOverlay(s, s.Source)
			if err != nil {
				return fmt.Errorf("cow %s: %w", s.Target, err)
			}
			srcs[i] = fd
			continue
		}
		if s.Kind == KindCgroup {
			fd, err := openCgroupDir(s)
			if err != nil {
				return err
			}
			srcs[i] = fd
			continue
		}
		if s.Kind == KindMask {
			// /dev/null of the host, for masking files: a character
			// device, bound read-only.
			fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				return fmt.Errorf("mask %s: %w", s.Target, os.NewSyscallError("open_tree /dev/null", err))
			}
			srcs[i] = fd
			continue
		}
		if s.Kind != KindBind && s.Kind != KindRoot {
			continue
		}
		if s.Kind == KindRoot {
			s.User = true // a caller's path: never through a symlink
		}
		fd, err := openSource(s, pre)
		if err != nil {
			return err
		}
		srcs[i] = fd
	}

	root, rootRW := -1, false
	if len(p.Steps) > 0 && p.Steps[0].Kind == KindRoot {
		// The caller's root (a bundle's rootfs), a detached clone.
		root, srcs[0], rootRW = srcs[0], -1, p.Steps[0].Writable
	} else {
		var err error
		if root, err = newTmpfs(0o755); err != nil {
			return fmt.Errorf("creating the root tmpfs: %w", err)
		}
	}
	defer unix.Close(root)
	if err := unix.MoveMount(root, "", unix.AT_FDCWD, stage, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching the root tmpfs at %s: %w", stage, os.NewSyscallError("move_mount", err))
	}

	var readOnlyAfter []string
	var skipped []string
	for i := range p.Steps {
		s := p.Steps[i]
		if beneathAny(s.Target, skipped) {
			continue
		}
		if s.Optional {
			fd, err := unix.Openat2(root, strings.TrimPrefix(s.Target, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
			if err != nil {
				skipped = append(skipped, s.Target)
				continue
			}
			unix.Close(fd)
		}
		switch s.Kind {
		case KindRoot:
			continue // staged above
		case KindMask:
			if err := mask(root, s.Target, srcs[i]); err != nil {
				return err
			}
			continue
		case KindReadOnly:
			if err := readOnlyBeneath(root, s.Target); err != nil {
				return err
			}
			continue
		case KindUnion:
			if err := union(root, s); err != nil {
				return fmt.Errorf("union %s: %w", s.Target, err)
			}
			continue
		}
		if err := applyStep(root, s, srcs[i]); err != nil {
			return fmt.Errorf("%s %s: %w", s.Kind, s.Target, err)
		}
		if s.Kind == KindTmpfs && (s.ReadOnly || s.Target == "/dev") {
			readOnlyAfter = append(readOnlyAfter, s.Target)
		}
		if s.Kind == KindProc {
			if err := protectProc(root); err != nil {
				return err
			}
		}
	}
	for _, t := range readOnlyAfter {
		if err := sealMount(root, t); err != nil {
			return err
		}
	}
	if rootRW || p.WritableRoot {
		return pivot(root)
	}
	if err := unix.MountSetattr(root, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("making the root read-only: %w", os.NewSyscallError("mount_setattr", err))
	}
	return pivot(root)
}

func openSource(s Step, pre []int) (int, error) {
	if s.FD >= 0 {
		if s.FD >= len(pre) {
			return -1, fmt.Errorf("bind %s: descriptor %d was not passed", s.Target, s.FD)
		}
		fd := pre[s.FD]
		pre[s.FD] = -1 // now owned by the caller's srcs slice
		return fd, nil
	}
	var fd int
	var err error
	if s.User {
		// A caller's source: never through a symlink (see OpenSource).
		src, oerr := OpenSource(s.Source)
		if oerr != nil {
			return -1, fmt.Errorf("bind %s: %w", s.Target, oerr)
		}
		fd, err = unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		unix.Close(src)
	} else {
		fd, err = unix.OpenTree(unix.AT_FDCWD, s.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	}
	if err != nil {
		return -1, fmt.Errorf("bind %s: opening source %s: %w", s.Target, s.Source, os.NewSyscallError("open_tree", err))
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !s.Device {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if s.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %s: setting attributes: %w", s.Target, os.NewSyscallError("mount_setattr", err))
	}
	return fd, nil
}

// openCgroupDir clones the sandbox's cgroup directory s.Source (a host
// path: the init still has the host's mount table here) as a detached,
// read-only, nosuid, nodev, noexec mount. The path is opened without
// following symlinks, and the clone is not recursive: it shows the cgroup
// filesystem only, from that directory down.
func openCgroupDir(s Step) (int, error) {
	src, err := OpenSource(s.Source)
	if err != nil {
		return -1, fmt.Errorf("cgroup %s: %w", s.Target, err)
	}
	defer unix.Close(src)
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("cgroup %s: cloning %s: %w", s.Target, s.Source, os.NewSyscallError("open_tree", err))
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("cgroup %s: making it read-only: %w", s.Target, os.NewSyscallError("mount_setattr", err))
	}
	return fd, nil
}

func applyStep(root int, s Step, src int) error {
	parent, name, err := mkdirParents(root, s.Target)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	switch s.Kind {
	case KindSymlink:
		return os.NewSyscallError("symlinkat", unix.Symlinkat(s.LinkTo, parent, name))
	case KindOverlay:
		if s.FD >= 0 {
			ov, err := stagedOverlay(root, s, src)
			if err != nil {
				return err
			}
			defer unix.Close(ov)
			src = ov
		}
		return attach(src, parent, name, false)
	case KindCgroup:
		return attach(src, parent, name, false)
	case KindBind:
		var st unix.Stat_t
		if err := unix.Fstat(src, &st); err != nil {
			return os.NewSyscallError("fstat", err)
		}
		return attach(src, parent, name, st.Mode&unix.S_IFMT != unix.S_IFDIR)
	case KindTmpfs:
		fd, err := newTmpfs(s.Mode)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return attach(fd, parent, name, false)
	case KindProc:
		fd, err := newFS("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return attach(fd, parent, name, false)
	case KindDevpts:
		fd, err := newFS("devpts", map[string]string{"newinstance": "", "ptmxmode": "0666", "mode": "0620"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return attach(fd, parent, name, false)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

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

// pivot makes root the process's root and detaches the old one.
func pivot(root int) error {
	if err := unix.Fchdir(root); err != nil {
		return os.NewSyscallError("fchdir", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return os.NewSyscallError("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", os.NewSyscallError("umount2", err))
	}
	return os.NewSyscallError("chdir", unix.Chdir("/"))
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

// beneathAny reports whether target is one of dirs or lies beneath one.
func beneathAny(target string, dirs []string) bool {
	for _, d := range dirs {
		if target == d || strings.HasPrefix(target, d+"/") {
			return true
		}
	}
	return false
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
