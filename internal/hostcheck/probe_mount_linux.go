package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProbeOverlay mounts an overlay inside a new user and mount namespace
// (unshare -Urm, from util-linux) over temporary directories, writes
// through it, and checks that the write reached the upper directory.
// Without unshare it reports Unknown.
func ProbeOverlay(ctx context.Context) Result {
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot probe: unshare (util-linux) not found", Fix: "apt-get install util-linux"}
	}
	dir, err := os.MkdirTemp("", "tent-doctor-overlay-")
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot probe: " + err.Error()}
	}
	defer removeProbeDir(dir)
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return Result{Status: Unknown, Detail: "cannot probe: " + err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	const script = `mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" "$1/merged" && echo ok >"$1/merged/probe"`
	out, err := exec.CommandContext(ctx, unshare, "-Urm", "sh", "-c", script, "sh", dir).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return overlayFailure(msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "upper", "probe")); err != nil {
		return Result{Status: Missing, Detail: "overlay mounted, but a write did not reach the upper directory: " + err.Error()}
	}
	return Result{Status: Available, Detail: "mounted and written in a user namespace (upper on " + os.TempDir() + ")"}
}

// overlayFailure explains a failed `unshare -Urm mount -t overlay` from
// what it printed (msg).
func overlayFailure(msg string) Result {
	res := Result{Status: Missing, Detail: "unshare -Urm + mount -t overlay: " + msg}
	switch {
	case strings.HasPrefix(msg, "unshare:"):
		res.Detail = "cannot create a user namespace to probe in: " + msg
		res.Fix = "make user namespaces available (see " + userNSCheck + ")"
	case strings.Contains(msg, "unknown filesystem type"):
		res.Fix = "modprobe overlay (and add overlay to /etc/modules)"
	default:
		res.Fix = "boot Linux 5.11 or newer (overlayfs in user namespaces); without it, cow mounts are unavailable"
	}
	return res
}

// ProbeIDMap, as root, clones a detached mount of a temporary directory
// (open_tree with OPEN_TREE_CLONE) and idmaps it (mount_setattr with
// MOUNT_ATTR_IDMAP) with the user namespace of a short-lived child.
// Unprivileged callers map their own uid and do not need idmapped mounts:
// for them it is Available without a probe.
func ProbeIDMap(ctx context.Context) Result {
	if os.Geteuid() != 0 {
		return Result{Status: Available, Detail: "not needed (unprivileged callers map their own uid)"}
	}
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot probe: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, sleep, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 65536}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return Result{Status: Missing, Detail: "cannot create a user namespace for the mapping: " + err.Error(), Fix: "make user namespaces available (see " + userNSCheck + ")"}
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	nsPath := fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid)
	nsFD, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot probe: " + (&os.PathError{Op: "open", Path: nsPath, Err: err}).Error()}
	}
	defer unix.Close(nsFD)

	dir, err := os.MkdirTemp("", "tent-doctor-idmap-")
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot probe: " + err.Error()}
	}
	defer removeProbeDir(dir)
	fsType := "unknown"
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		fsType = fsTypeName(st.Type)
	}
	treeFD, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return idmapFailure("open_tree(OPEN_TREE_CLONE)", err, dir, fsType)
	}
	defer unix.Close(treeFD) // closing a detached mount unmounts it
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsFD)}
	if err := unix.MountSetattr(treeFD, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return idmapFailure("mount_setattr(MOUNT_ATTR_IDMAP)", err, dir, fsType)
	}
	return Result{Status: Available, Detail: fmt.Sprintf("open_tree + mount_setattr(MOUNT_ATTR_IDMAP) work on %s (%s); support is per filesystem", os.TempDir(), fsType)}
}

// idmapFailure explains a failed idmapped-mount syscall.
func idmapFailure(call string, err error, dir, fsType string) Result {
	var errno syscall.Errno
	name := ""
	if errors.As(err, &errno) {
		name = " (" + unix.ErrnoName(errno) + ")"
	}
	res := Result{Status: Missing, Detail: fmt.Sprintf("%s on %s (%s): %v%s", call, dir, fsType, err, name)}
	switch {
	case errors.Is(err, unix.ENOSYS):
		res.Fix = "boot Linux 5.12 or newer (mount_setattr)"
	case errors.Is(err, unix.EINVAL):
		res.Fix = "use a filesystem that supports idmapped mounts for rw mounts as root (ext4, xfs, btrfs: 5.12-5.15; tmpfs: 6.3), or run tent as an unprivileged user"
	default:
		res.Fix = "run tent as an unprivileged user, whose uid maps to itself without idmapped mounts"
	}
	return res
}

// fsTypeName names the common statfs magic numbers.
func fsTypeName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("fs magic %#x", magic)
}

// removeProbeDir removes a probe's temporary directory, making directories
// that overlayfs left without permissions (work/work) writable first.
func removeProbeDir(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
