package fs

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// stage is where the new root is attached before pivot_root. Sources are
// opened before it is covered, so hiding the host's /tmp is harmless.
const stage = "/tmp"

// resolveSafe refuses every symlink, magic link and escape from dirfd
// (fs/layer's walks resolve with the same flags).
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
	srcs := &sources{fds: make([]int, len(p.Steps))}
	defer srcs.close()
	if err := p.openSources(srcs, pre); err != nil {
		return err
	}

	root, rootRW := -1, false
	if len(p.Steps) > 0 && p.Steps[0].Kind == KindRoot {
		// The caller's root (a bundle's rootfs), a detached clone.
		root, srcs.fds[0], rootRW = srcs.fds[0], -1, p.Steps[0].Writable
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
	// Private before anything is mounted in it, whoever cloned it (see
	// MakePrivate): once it is in this namespace, the sandbox may.
	if err := unix.Mount("", stage, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the new root private: %w", os.NewSyscallError("mount", err))
	}

	readOnlyAfter, err := p.applySteps(root, srcs.fds)
	if err != nil {
		return err
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

// sources holds what Apply opens before the new root covers the host's
// view: a detached mount (or -1) per step, and the descriptors of the
// host-side overlay layers a step's Upper and Work now name.
type sources struct {
	fds    []int
	layers []int
}

func (s *sources) close() {
	for _, fd := range s.layers {
		unix.Close(fd)
	}
	for _, fd := range s.fds {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

// openSources opens the source of every step that has one into srcs.
func (p *Plan) openSources(srcs *sources, pre []int) error {
	for i, s := range p.Steps {
		if s.Kind == KindOverlay {
			if s.FD >= 0 { // lower layer from the host: staged in applyStep
				fd, err := openSource(s, pre)
				if err != nil {
					return err
				}
				srcs.fds[i] = fd
				// The layers' host paths are covered once the new root is
				// staged: keep them as descriptors.
				for _, dir := range []*string{&p.Steps[i].Upper, &p.Steps[i].Work} {
					dfd, err := unix.Open(*dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
					if err != nil {
						return fmt.Errorf("cow %s: %w", s.Target, &os.PathError{Op: "open", Path: *dir, Err: err})
					}
					srcs.layers = append(srcs.layers, dfd)
					*dir = fmt.Sprintf("/proc/self/fd/%d", dfd)
				}
				continue
			}
			fd, err := newOverlay(s, s.Source)
			if err != nil {
				return fmt.Errorf("cow %s: %w", s.Target, err)
			}
			srcs.fds[i] = fd
			continue
		}
		if (s.Kind == KindProc || s.Kind == KindSysfs) && s.FD >= 0 {
			// A procfs or sysfs made for the sandbox on the host (a
			// pod's pid namespace: Plan.UseProc; Plan.AddSysfs).
			fd, err := openSource(s, pre)
			if err != nil {
				return err
			}
			srcs.fds[i] = fd
			continue
		}
		if s.Kind == KindCgroup {
			fd, err := openCgroupDir(s)
			if err != nil {
				return err
			}
			srcs.fds[i] = fd
			continue
		}
		if s.Kind == KindMask {
			// /dev/null of the host, for masking files: a character
			// device, bound read-only.
			fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				return fmt.Errorf("mask %s: %w", s.Target, os.NewSyscallError("open_tree /dev/null", err))
			}
			srcs.fds[i] = fd
			if err := MakePrivate(fd); err != nil {
				return fmt.Errorf("mask %s: %w", s.Target, err)
			}
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
		srcs.fds[i] = fd
	}
	return nil
}

// applySteps mounts every step beneath root (the staged new root), from
// its source in srcs, skipping the optional steps whose target is
// missing and everything beneath them. It returns the targets to make
// read-only once everything beneath them is mounted.
func (p *Plan) applySteps(root int, srcs []int) ([]string, error) {
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
				return nil, err
			}
			continue
		case KindReadOnly:
			if err := readOnlyBeneath(root, s.Target); err != nil {
				return nil, err
			}
			continue
		case KindUnion:
			if err := union(root, s); err != nil {
				return nil, fmt.Errorf("union %s: %w", s.Target, err)
			}
			continue
		}
		if err := applyStep(root, s, srcs[i]); err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.Kind, s.Target, err)
		}
		if s.Kind == KindTmpfs && (s.ReadOnly || s.Target == "/dev") {
			readOnlyAfter = append(readOnlyAfter, s.Target)
		}
		if s.Kind == KindProc {
			if err := protectProc(root); err != nil {
				return nil, err
			}
		}
	}
	return readOnlyAfter, nil
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
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID, Propagation: unix.MS_PRIVATE} // see MakePrivate
	if s.Slave {
		attr.Propagation = unix.MS_SLAVE
	}
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
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC,
		Propagation: unix.MS_PRIVATE} // see MakePrivate
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
		if s.FD >= 0 {
			return attach(src, parent, name, false)
		}
		fd, err := newFS("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return attach(fd, parent, name, false)
	case KindSysfs:
		if s.FD < 0 {
			return fmt.Errorf("sysfs %s: no descriptor", s.Target)
		}
		return attach(src, parent, name, false)
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

// beneathAny reports whether target is one of dirs or lies beneath one.
func beneathAny(target string, dirs []string) bool {
	for _, d := range dirs {
		if target == d || strings.HasPrefix(target, d+"/") {
			return true
		}
	}
	return false
}
