package fs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Attaching a mount to a running sandbox.
//
// The sandbox's init has pivoted into its own root, so the host paths an
// unprivileged caller's binds come from are no longer in its view. Before
// building the root, [SaveHostView] keeps a copy of the host's mount table
// as a mount namespace held by one descriptor (owned by the sandbox's user
// namespace, so the init may clone mounts from it); [AttachStep] opens a
// new mount's source from that copy on a throw-away thread that joins it,
// and moves the result into the sandbox. A root caller's sources are
// opened on the host instead (idmapped there) and passed as descriptors.
//
// A missing mount point is created on the sandbox's root tmpfs only,
// through a private writable clone of that mount: the sandbox's own view
// of / stays read-only throughout, and nothing is ever created in a bind
// of a host directory. A target beneath another mount must already exist.

// SaveHostView returns a descriptor of a new mount namespace that copies
// the calling process's current one (the host's view, before
// [Plan.Apply]). Call it in the init before Apply.
func SaveHostView() (int, error) {
	fd, err := onDisposableThread(func() (int, error) {
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			return -1, os.NewSyscallError("unshare(CLONE_NEWNS)", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return -1, os.NewSyscallError("mount(MS_PRIVATE)", err)
		}
		fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, os.NewSyscallError("open /proc/thread-self/ns/mnt", err)
		}
		return fd, nil
	})
	if err != nil {
		return -1, fmt.Errorf("keeping the host view for attached mounts: %w", err)
	}
	return fd, nil
}

// onDisposableThread runs f on a thread of its own, locked and never
// unlocked: f changes the thread's namespaces or filesystem context for
// good, and the runtime discards the thread when f returns.
func onDisposableThread(f func() (int, error)) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := f()
		done <- result{fd, err}
	}()
	r := <-done
	return r.fd, r.err
}

// AttachStep mounts s (a bind or an overlay, as [NewPlan] makes them for
// a caller's mount) into the calling process's root, which [Plan.Apply]
// built. Its source is pre[s.FD] when s.FD >= 0, else s.Source opened in
// the hostView namespace. The mount point must not already be a mount of
// the plan (the caller checks).
func AttachStep(hostView int, s Step, pre []int) error {
	fd, err := attachStep(hostView, s, pre)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// AttachSteps attaches steps in order, each as [AttachStep] does (a
// mount, then the guards beneath it): if one fails, those already
// attached are detached again, so that a mount is never left in the
// sandbox without its guards.
func AttachSteps(hostView int, steps []Step, pre []int) error {
	var mounted []int
	defer func() {
		for _, fd := range mounted {
			unix.Close(fd)
		}
	}()
	for _, s := range steps {
		fd, err := attachStep(hostView, s, pre)
		if err != nil {
			// Detached through the descriptor of each mount's root, not
			// its path, which the sandbox may have changed meanwhile.
			for i := len(mounted) - 1; i >= 0; i-- {
				_ = unix.Unmount("/proc/self/fd/"+strconv.Itoa(mounted[i]), unix.MNT_DETACH)
			}
			return err
		}
		mounted = append(mounted, fd)
	}
	return nil
}

// attachStep is AttachStep, returning an O_PATH descriptor of the
// attached mount's root.
func attachStep(hostView int, s Step, pre []int) (int, error) {
	if err := ValidateTarget(s.Target); err != nil {
		return -1, err
	}
	if s.Kind != KindBind && s.Kind != KindOverlay {
		return -1, fmt.Errorf("%w: cannot attach a %s", ErrInvalidMount, s.Kind)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open /", err)
	}
	defer unix.Close(root)

	var src int
	switch {
	case s.FD >= 0:
		if src, err = openSource(s, pre); err != nil {
			return -1, err
		}
		if s.Kind == KindOverlay {
			// pre holds the (idmapped) lower layer, then a detached
			// mount of the directory holding the upper and work
			// directories: overlayfs takes its layers by path, in this
			// mount namespace.
			if s.FD+1 >= len(pre) {
				unix.Close(src)
				return -1, fmt.Errorf("cow %s: the layer directory was not passed", s.Target)
			}
			layers := pre[s.FD+1]
			pre[s.FD+1] = -1
			lower := src
			src, err = liveStagedOverlay(root, s, lower, layers)
			unix.Close(lower)
			unix.Close(layers)
			if err != nil {
				return -1, err
			}
		}
	case hostView < 0:
		return -1, errors.New("this sandbox kept no host view: its mounts come from the host as descriptors")
	default:
		if src, err = inHostView(hostView, func() (int, error) {
			if s.Kind == KindOverlay {
				return newOverlay(s, s.Source)
			}
			return openSource(s, nil)
		}); err != nil {
			return -1, err
		}
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return -1, os.NewSyscallError("fstat", err)
	}
	isFile := st.Mode&unix.S_IFMT != unix.S_IFDIR
	if err := makeMountpoint(root, s.Target, isFile); err != nil {
		return -1, err
	}
	target, err := unix.Openat2(root, strings.TrimPrefix(s.Target, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("%w: mount point %s does not exist in the sandbox (it lies beneath another mount, where the sandbox itself could not create it)", ErrInvalidMount, s.Target)
		}
		return -1, fmt.Errorf("opening the mount point %s: %w", s.Target, os.NewSyscallError("openat2", err))
	}
	defer unix.Close(target)
	var tst unix.Stat_t
	if err := unix.Fstat(target, &tst); err != nil {
		return -1, os.NewSyscallError("fstat", err)
	}
	if (tst.Mode&unix.S_IFMT != unix.S_IFDIR) != isFile {
		return -1, fmt.Errorf("%w: %s: cannot mount a %s over a %s", ErrInvalidMount, s.Target, kindName(isFile), kindName(!isFile))
	}
	if err := unix.MoveMount(src, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return -1, fmt.Errorf("attaching %s: %w", s.Target, os.NewSyscallError("move_mount", err))
	}
	fd, err := unix.FcntlInt(uintptr(src), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unmount("/proc/self/fd/"+strconv.Itoa(src), unix.MNT_DETACH)
		return -1, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
	}
	return fd, nil
}

func kindName(file bool) string {
	if file {
		return "file"
	}
	return "directory"
}

// inHostView runs open on a throw-away thread that joined the hostView
// mount namespace, and returns the descriptor it made.
func inHostView(hostView int, open func() (int, error)) (int, error) {
	return onDisposableThread(func() (int, error) {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return -1, os.NewSyscallError("unshare(CLONE_FS)", err)
		}
		if err := unix.Setns(hostView, unix.CLONE_NEWNS); err != nil {
			return -1, os.NewSyscallError("setns(host view)", err)
		}
		return open()
	})
}

// writableRootClone returns a detached, writable clone of the root tmpfs
// mount alone (no submounts): what tent writes to the sandbox's root goes
// through it, while the sandbox's own view of / stays read-only.
func writableRootClone(root int) (int, error) {
	clone, err := unix.OpenTree(root, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("cloning the root mount: %w", os.NewSyscallError("open_tree", err))
	}
	if err := unix.MountSetattr(clone, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
		unix.Close(clone)
		return -1, fmt.Errorf("a writable clone of the root mount: %w", os.NewSyscallError("mount_setattr", err))
	}
	return clone, nil
}

// makeMountpoint creates target's missing components (directories, and
// the last one as a file when file is set) on the root tmpfs, through a
// writable clone of that one mount. Components that exist are left as
// they are; a component beneath another mount is not created (the clone
// shows the tmpfs beneath it), and Openat2 in the real view then fails.
func makeMountpoint(root int, target string, file bool) error {
	clone, err := writableRootClone(root)
	if err != nil {
		return err
	}
	defer unix.Close(clone)
	// Only create on the root tmpfs where the real view shows the root
	// tmpfs too: stop at the first component that is a mount point there.
	rel := strings.TrimPrefix(target, "/")
	parts := strings.Split(rel, "/")
	cur := ""
	for i, c := range parts {
		if cur == "" {
			cur = c
		} else {
			cur += "/" + c
		}
		real, err := unix.Openat2(root, cur, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveSafe})
		if err == nil {
			onRoot, merr := sameMount(root, real)
			unix.Close(real)
			if merr != nil {
				return merr
			}
			if !onRoot {
				return nil // beneath another mount: create nothing there
			}
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mount point %s: %w", target, os.NewSyscallError("openat2", err))
		}
		parent, name, err := mkdirParents(clone, "/"+cur)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", target, err)
		}
		last := i == len(parts)-1
		if last && file {
			fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			unix.Close(parent)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("mount point %s: %w", target, os.NewSyscallError("openat", err))
			}
			return nil
		}
		err = unix.Mkdirat(parent, name, 0o755)
		unix.Close(parent)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mount point %s: %w", target, os.NewSyscallError("mkdirat", err))
		}
	}
	return nil
}

// sameMount reports whether fd is on the same mount as root.
func sameMount(root, fd int) (bool, error) {
	var a, b unix.Statx_t
	if err := unix.Statx(root, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &a); err != nil {
		return false, os.NewSyscallError("statx", err)
	}
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &b); err != nil {
		return false, os.NewSyscallError("statx", err)
	}
	return a.Mnt_id == b.Mnt_id, nil
}

// liveStagedOverlay is stagedOverlay for a running sandbox: overlayfs
// takes its layers by path, so the (idmapped) clone lowerFD and the
// layer directory layersFD (holding "upper" and "work") are attached for
// a moment on private directories of the root tmpfs — the lower shows
// the very files the sandbox is about to see through the overlay, the
// layers directory what the sandbox will have written — then detached
// and the directories removed.
func liveStagedOverlay(root int, s Step, lowerFD, layersFD int) (int, error) {
	tag := strconv.Itoa(lowerFD)
	lower, layers := ".tent-lower-"+tag, ".tent-layers-"+tag
	for _, name := range []string{lower, layers} {
		if err := makeMountpoint(root, "/"+name, false); err != nil {
			return -1, err
		}
	}
	defer func() {
		if clone, err := writableRootClone(root); err == nil {
			_ = unix.Unlinkat(clone, lower, unix.AT_REMOVEDIR)
			_ = unix.Unlinkat(clone, layers, unix.AT_REMOVEDIR)
			unix.Close(clone)
		}
	}()
	for _, st := range []struct {
		fd   int
		name string
	}{{lowerFD, lower}, {layersFD, layers}} {
		if err := unix.MoveMount(st.fd, "", root, st.name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return -1, fmt.Errorf("staging a layer of cow %s: %w", s.Target, os.NewSyscallError("move_mount", err))
		}
		defer unix.Unmount("/"+st.name, unix.MNT_DETACH)
	}
	s.Upper, s.Work = "/"+layers+"/upper", "/"+layers+"/work"
	fd, err := newOverlay(s, "/"+lower)
	if err != nil {
		return -1, fmt.Errorf("cow %s: %w", s.Target, err)
	}
	return fd, nil
}
