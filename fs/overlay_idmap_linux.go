package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoIDMappedLayers is a layer of an overlay that the kernel, or the
// layer's filesystem, cannot idmap: overlayfs takes idmapped layers from
// Linux 5.19, on filesystems that can be idmapped.
var ErrNoIDMappedLayers = errors.New("idmapped overlay layers (Linux 5.19) are not available")

// ErrLayersInRange is an overlay whose image layers are owned by the
// range already (containerd's snapshot of a user-namespaced pod, chowned
// when it was unpacked): idmapping them again would shift them twice.
// The caller binds the overlay as it is.
var ErrLayersInRange = errors.New("the overlay's layers are in the id range already")

// maxFsconfigString is the longest string value fsconfig takes: the
// kernel copies at most 256 bytes, its NUL included.
const maxFsconfigString = 255

// OpenIDMappedOverlay rebuilds the overlay mounted at dir (an image's
// rootfs, as containerd's overlay snapshotter mounts it) over idmapped
// lower layers, and returns it as a detached mount (fsmount) for
// [Step.FD]: nosuid, nodev, private.
//
// The kernel cannot idmap an overlay mount, but overlayfs takes idmapped
// layers. Every lower (and data-only) layer is a read-only clone of the
// layer's directory idmapped with the user namespace usernsFD (which maps
// the container's ids 0..N-1 onto host ids BASE..BASE+N-1), so that a
// file owned by k on disk shows as host id BASE+k. The upper and work
// directories are not idmapped: overlayfs works in them as its mounter,
// host root, which such a mapping cannot represent. What the container
// creates there gets its own host ids, and a copy-up takes the owner the
// idmapped lower shows (BASE+k): both consistent with the lower. The
// merged root shows the upper directory's own owner: when it is 0:0 (as
// containerd makes it) it is chowned to hostUID:hostGID, so that the
// container's root owns its "/". A lower-only overlay (no upperdir) is
// rebuilt read-only.
//
// dir must be the root of an overlay mount of the process's mount
// namespace (found in mountinfo by mount id, never by path). Its options
// are kept as they were (index=, metacopy=, redirect_dir=, xino=,
// volatile, userxattr, ...); its layer paths are opened without
// following symlinks ([OpenSource]). The original mount stays: its upper
// and work directories are now shared by two overlays, so only the
// returned one may be used (overlayfs refuses that with index=on).
//
// Layers go to the kernel by short names: Linux 6.8's lowerdir+ one at a
// time where the kernel has it, else one lowerdir value, which fsconfig
// limits to 255 bytes (about 50 layers). The overlay is built on a thread
// of its own, in a private mount namespace where the idmapped layers are
// attached while the overlay is created (kernels before 6.15 take no
// detached layer); the thread ends with the call. A layer the kernel or
// its filesystem cannot idmap is an error wrapping [ErrNoIDMappedLayers].
// On error no descriptor is left open; the upper directory may have been
// chowned.
func OpenIDMappedOverlay(dir string, usernsFD int, hostUID, hostGID uint32) (int, error) {
	return openIDMappedOverlay(dir, usernsFD, hostUID, hostGID, false)
}

// openIDMappedOverlay is OpenIDMappedOverlay; joined gives the layers as
// one lowerdir value even where the kernel has lowerdir+ (for tests).
func openIDMappedOverlay(dir string, usernsFD int, hostUID, hostGID uint32, joined bool) (int, error) {
	// The thread works in /proc/self/fd.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return -1, fmt.Errorf("idmapped overlay of %s: %w", dir, err)
	}
	fd, err := onPrivateThread(func() (int, error) {
		// In the thread's namespace (a copy of the process's): the
		// mount ids of statx and mountinfo are that namespace's.
		o, err := overlayAt(abs)
		if err != nil {
			return -1, err
		}
		return buildIDMappedOverlay(o, usernsFD, hostUID, hostGID, joined)
	})
	if err != nil {
		return -1, fmt.Errorf("idmapped overlay of %s: %w", dir, err)
	}
	return fd, nil
}

// overlayAt checks that dir is the root of an overlay mount and returns
// that mount's options.
func overlayAt(dir string) (overlayOptions, error) {
	fd, err := OpenSource(dir)
	if err != nil {
		return overlayOptions{}, err
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return overlayOptions{}, os.NewSyscallError("fstatfs", err)
	}
	if sfs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return overlayOptions{}, fmt.Errorf("not an overlay mount (filesystem magic %#x)", sfs.Type)
	}
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return overlayOptions{}, os.NewSyscallError("statx", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return overlayOptions{}, errors.New("statx reports no mount id here (Linux 5.8)")
	}
	if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return overlayOptions{}, errors.New("not the root of its overlay mount")
	}
	root, fstype, superOpts, err := mountinfoEntry(stx.Mnt_id)
	if err != nil {
		return overlayOptions{}, err
	}
	if fstype != "overlay" || root != "/" {
		return overlayOptions{}, fmt.Errorf("mount %d is %s of %s, not the root of an overlay", stx.Mnt_id, root, fstype)
	}
	o, err := parseOverlayOptions(superOpts)
	if err != nil {
		return o, fmt.Errorf("overlay options %q: %w", superOpts, err)
	}
	return o, nil
}

// onPrivateThread runs f on a thread of its own, which has its own
// working directory (/proc/self/fd, so that a descriptor's name there is
// its number) and its own mount namespace, private (nothing mounted
// there propagates), and which ends with f: it is never unlocked, so the
// Go runtime discards it, and the namespace goes with it.
func onPrivateThread(f func() (int, error)) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread, which the runtime keeps (and whose mount
			// namespace /proc/self shows): hold it, so that another
			// thread runs f, and give it back unchanged.
			fd, err := onPrivateThread(f)
			runtime.UnlockOSThread()
			ch <- result{fd, err}
			return
		}
		fd, err := -1, unix.Unshare(unix.CLONE_FS|unix.CLONE_NEWNS)
		if err != nil {
			err = os.NewSyscallError("unshare(CLONE_FS|CLONE_NEWNS)", err)
		} else if err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			err = fmt.Errorf("making the thread's mount namespace private: %w", os.NewSyscallError("mount", err))
		} else if err = unix.Chdir("/proc/self/fd"); err != nil {
			err = os.NewSyscallError("chdir /proc/self/fd", err)
		} else {
			fd, err = f()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// buildIDMappedOverlay opens o's layers and creates the overlay; it runs
// on onPrivateThread's thread.
func buildIDMappedOverlay(o overlayOptions, usernsFD int, hostUID, hostGID uint32, joined bool) (int, error) {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if err := checkNotInRange(o, hostUID, hostGID); err != nil {
		return -1, err
	}
	var names []string
	for _, p := range append(append([]string{}, o.lower...), o.data...) {
		fd, err := idmappedLayer(p, usernsFD)
		if err != nil {
			return -1, err
		}
		fds = append(fds, fd)
		names = append(names, strconv.Itoa(fd))
	}
	var upper, work string
	if o.upper != "" {
		ufd, err := openUpper(o.upper, hostUID, hostGID)
		if err != nil {
			return -1, err
		}
		fds = append(fds, ufd)
		wfd, err := OpenSource(o.work)
		if err != nil {
			return -1, fmt.Errorf("workdir: %w", err)
		}
		fds = append(fds, wfd)
		upper, work = strconv.Itoa(ufd), strconv.Itoa(wfd)
	}
	// Overlayfs takes a private clone of each layer's mount, which
	// kernels before 6.15 allow only of a mount of the caller's
	// namespace: attach the layers there (stacked on its root; this
	// namespace is the thread's, private, and goes with it).
	for i, fd := range fds[:len(names)] {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, "/", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return -1, fmt.Errorf("layer %s: attaching it: %w", o.layers()[i], os.NewSyscallError("move_mount", err))
		}
	}
	plus := !joined && hasLowerdirPlus()
	return createOverlay(o, names[:len(o.lower)], names[len(o.lower):], upper, work, plus)
}

// checkNotInRange returns ErrLayersInRange when o's bottom layer (the
// image's first, which nothing run in the container ever writes: its
// writes go to the upper layer, whose own files are the range's) is owned
// by hostUID:hostGID.
func checkNotInRange(o overlayOptions, hostUID, hostGID uint32) error {
	if len(o.lower) == 0 {
		return nil
	}
	bottom := o.lower[len(o.lower)-1]
	fd, err := OpenSource(bottom)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("layer %s: %w", bottom, os.NewSyscallError("fstat", err))
	}
	if st.Uid == hostUID && st.Gid == hostGID {
		return fmt.Errorf("layer %s: %w", bottom, ErrLayersInRange)
	}
	return nil
}

// idmappedLayer opens the layer directory path (never through a
// symlink) as a detached, private, read-only clone idmapped with
// usernsFD.
func idmappedLayer(path string, usernsFD int) (int, error) {
	src, err := OpenSource(path)
	if err != nil {
		return -1, fmt.Errorf("layer: %w", err)
	}
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	unix.Close(src)
	if err != nil {
		return -1, fmt.Errorf("layer %s: %w", path, os.NewSyscallError("open_tree", err))
	}
	if err := MakePrivate(fd); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("layer %s: %w", path, err)
	}
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(usernsFD),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		err = os.NewSyscallError("mount_setattr(MOUNT_ATTR_IDMAP)", err)
		if errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("layer %s: %w: the kernel or the layer's filesystem cannot idmap it: %w", path, ErrNoIDMappedLayers, err)
		}
		return -1, fmt.Errorf("layer %s: %w", path, err)
	}
	return fd, nil
}

// openUpper opens the upper directory path (never through a symlink)
// and, when its own owner is 0:0, chowns that one inode to uid:gid: the
// merged root shows the upper directory's owner.
func openUpper(path string, uid, gid uint32) (int, error) {
	fd, err := OpenSource(path)
	if err != nil {
		return -1, fmt.Errorf("upperdir: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("upperdir %s: %w", path, os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("upperdir %s is not a directory", path)
	}
	if st.Uid == 0 && st.Gid == 0 {
		if err := unix.Fchownat(fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("upperdir %s: giving the merged root to %d:%d: %w", path, uid, gid, os.NewSyscallError("fchownat", err))
		}
	}
	return fd, nil
}

// hasLowerdirPlus reports whether overlayfs takes layers one at a time
// (lowerdir+, Linux 6.8). It resolves the layer at once, so a name that
// does not exist in the working directory (/proc/self/fd) is ENOENT;
// Linux 6.5 to 6.7 refuse the key (EINVAL), and older kernels' legacy
// contexts take any key until the overlay is created.
func hasLowerdirPlus() bool {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fsfd)
	return errors.Is(unix.FsconfigSetString(fsfd, "lowerdir+", "-1"), unix.ENOENT)
}

// createOverlay creates the overlay of o with these layer names (in the
// working directory, /proc/self/fd) and returns its detached mount.
func createOverlay(o overlayOptions, lower, data []string, upper, work string, plus bool) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("fsopen overlay", err)
	}
	defer unix.Close(fsfd)
	set := func(key, value, what string) error {
		if err := unix.FsconfigSetString(fsfd, key, value); err != nil {
			return fmt.Errorf("overlay %s: %w%s", what, os.NewSyscallError("fsconfig", err), fsLog(fsfd))
		}
		return nil
	}
	if plus {
		for i, l := range lower {
			if err := set("lowerdir+", l, "lowerdir+="+o.lower[i]); err != nil {
				return -1, err
			}
		}
		for i, d := range data {
			if err := set("datadir+", d, "datadir+="+o.data[i]); err != nil {
				return -1, err
			}
		}
	} else {
		value := strings.Join(lower, ":")
		if len(data) > 0 {
			value += "::" + strings.Join(data, ":")
		}
		if len(value) > maxFsconfigString {
			return -1, fmt.Errorf("the overlay's %d layers do not fit in one lowerdir value of at most %d bytes (fsconfig's limit), and this kernel cannot take them one at a time (lowerdir+, Linux 6.8)",
				len(lower)+len(data), maxFsconfigString)
		}
		if err := set("lowerdir", value, "lowerdir of "+strconv.Itoa(len(lower)+len(data))+" layers"); err != nil {
			return -1, err
		}
	}
	if upper != "" {
		if err := set("upperdir", upper, "upperdir="+o.upper); err != nil {
			return -1, err
		}
		if err := set("workdir", work, "workdir="+o.work); err != nil {
			return -1, err
		}
	}
	for _, opt := range o.other {
		if opt.flag {
			err = unix.FsconfigSetFlag(fsfd, opt.key)
		} else {
			err = unix.FsconfigSetString(fsfd, opt.key, opt.value)
		}
		if err != nil {
			return -1, fmt.Errorf("overlay option %s: %w%s", opt.key, os.NewSyscallError("fsconfig", err), fsLog(fsfd))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		log := fsLog(fsfd)
		if errors.Is(err, unix.EINVAL) && log == "" {
			log = " (the kernel says why in its log, dmesg; before Linux 5.19 overlayfs takes no idmapped overlay layers)"
		}
		return -1, fmt.Errorf("creating the overlay: %w%s", os.NewSyscallError("fsconfig", err), log)
	}
	attrs := unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if upper == "" {
		attrs |= unix.MOUNT_ATTR_RDONLY
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return -1, fmt.Errorf("%w%s", os.NewSyscallError("fsmount overlay", err), fsLog(fsfd))
	}
	if err := MakePrivate(mnt); err != nil {
		unix.Close(mnt)
		return -1, err
	}
	return mnt, nil
}

// fsLog reads the messages the kernel left in the filesystem context
// fsfd's log (a few, bounded), as " (kernel: ...)", or "" if none.
func fsLog(fsfd int) string {
	var msgs []string
	buf := make([]byte, 4096)
	for range 16 {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (kernel: " + strings.Join(msgs, "; ") + ")"
}
