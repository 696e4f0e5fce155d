package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/internal/hostcheck"
)

// Check is one line of the doctor's report.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "available", "degraded", "missing" (or "unknown" when a probe could not run)
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorReport is the result of [Doctor]: one [Check] per protection, in a
// fixed order.
type DoctorReport struct {
	Checks []Check `json:"checks"`
}

// Names of the doctor's checks, in report order.
const (
	CheckUserNS   = "user namespaces"
	CheckLandlock = "landlock"
	CheckSeccomp  = "seccomp"
	CheckCgroups  = "cgroups"
	CheckOverlay  = "overlayfs in userns"
	CheckIDMap    = "idmapped mounts"
	CheckKernel   = "kernel"
)

// probeTimeout bounds each live probe.
const probeTimeout = 10 * time.Second

// Doctor checks this host for every protection tent uses: user namespaces,
// Landlock, seccomp, cgroups, overlayfs in a user namespace, idmapped mounts
// and the kernel version. It reads /proc and /sys and runs short live
// probes (child processes in new namespaces, a detached mount); it changes
// nothing lasting and leaves no process or temporary directory behind.
// Probes that need a helper binary (unshare from util-linux) report
// "unknown" when it is absent. Cancelling ctx kills running probes.
func Doctor(ctx context.Context) *DoctorReport {
	const procRoot, sysRoot = "/proc", "/sys"
	r := &DoctorReport{}
	add := func(name string, res hostcheck.Result) {
		r.Checks = append(r.Checks, Check{Name: name, Status: string(res.Status), Detail: res.Detail, Fix: res.Fix})
	}
	add(CheckUserNS, withReducedTier(checkUserNS(ctx, procRoot)))
	abi, err := fs.LandlockABI()
	add(CheckLandlock, hostcheck.Landlock(abi, err, sysRoot))
	_, err = unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		err = os.NewSyscallError("prctl", err)
	}
	add(CheckSeccomp, hostcheck.Seccomp(procRoot, err))
	add(CheckCgroups, checkCgroups(procRoot))
	add(CheckOverlay, checkOverlay(ctx))
	add(CheckIDMap, checkIDMap(ctx))
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		add(CheckKernel, hostcheck.Result{Status: hostcheck.Unknown, Detail: "uname: " + err.Error()})
	} else {
		add(CheckKernel, hostcheck.Kernel(unix.ByteSliceToString(u.Release[:])))
	}
	return r
}

// WriteText prints one line per check (aligned: name, status, detail) and an
// indented "fix:" line where set.
func (r *DoctorReport) WriteText(w io.Writer) error {
	nameW, statusW := 0, 0
	for _, c := range r.Checks {
		nameW = max(nameW, len(c.Name))
		statusW = max(statusW, len(c.Status))
	}
	for _, c := range r.Checks {
		line := fmt.Sprintf("%-*s  %-*s  %s", nameW, c.Name, statusW, c.Status, c.Detail)
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
			return err
		}
		if c.Fix != "" {
			if _, err := fmt.Fprintf(w, "%*s  fix: %s\n", nameW, "", c.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkUserNS probes user namespace creation for this process and reads the
// sysctls that decide it for unprivileged users.
func checkUserNS(ctx context.Context, procRoot string) hostcheck.Result {
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	probeErr := probeUserNS(ctx)
	unpriv := hostcheck.UserNS(procRoot)
	if os.Geteuid() == 0 {
		root := hostcheck.UserNSForRoot(procRoot)
		if probeErr != nil {
			return hostcheck.Result{Status: hostcheck.Missing, Detail: "probe as root failed: " + probeErr.Error() + "; " + root.Detail, Fix: root.Fix}
		}
		res := hostcheck.Result{Status: hostcheck.Available, Detail: "root can create them (probe ok)"}
		if unpriv.Status == hostcheck.Available {
			res.Detail += "; unprivileged users can too (no sysctl restricts them)"
		} else {
			res.Detail += "; unprivileged users cannot: " + unpriv.Detail
			if unpriv.Fix != "" {
				res.Fix = "to let unprivileged users run tent: " + unpriv.Fix
			}
		}
		return res
	}
	switch {
	case probeErr != nil:
		d := "probe failed: " + probeErr.Error()
		if unpriv.Status != hostcheck.Available {
			d += "; " + unpriv.Detail
		}
		return hostcheck.Result{Status: hostcheck.Missing, Detail: d, Fix: unpriv.Fix}
	case unpriv.Status == hostcheck.Missing:
		// Only AppArmor's restriction lets the probe through: a profile
		// allows this process, or the namespace was created without
		// capabilities.
		return hostcheck.Result{Status: hostcheck.Degraded, Detail: "probe ok, but " + unpriv.Detail + "; tent needs an AppArmor profile that allows its binary", Fix: unpriv.Fix}
	}
	return hostcheck.Result{Status: hostcheck.Available, Detail: "probe ok; " + unpriv.Detail}
}

// notProbed is the result of a live probe skipped because ctx is done.
func notProbed(err error) hostcheck.Result {
	return hostcheck.Result{Status: hostcheck.Unknown, Detail: "not probed: " + err.Error()}
}

// probeUserNS runs /bin/true in a new user and mount namespace, mapping this
// process's uid and gid to root inside, as tent's init would be.
func probeUserNS(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	truePath, err := exec.LookPath("true")
	if err != nil {
		truePath = "/bin/true"
	}
	cmd := exec.CommandContext(ctx, truePath)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return fmt.Errorf("clone(CLONE_NEWUSER|CLONE_NEWNS): %w (%s)", errno, unix.ErrnoName(errno))
		}
		return err
	}
	return nil
}

// checkCgroups reports the cgroup mode and whether this user can create a
// sandbox cgroup.
func checkCgroups(procRoot string) hostcheck.Result {
	f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: err.Error()}
	}
	mounts, err := hostcheck.CgroupMode(f)
	f.Close()
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: err.Error()}
	}
	h, err := cgroups.Detect(procRoot)
	if err != nil {
		return hostcheck.Cgroups(mounts, hostcheck.CgroupProbe{Err: err})
	}
	v, err := canCreateSandboxCgroup(h)
	p := hostcheck.CgroupProbe{Version: v.String(), Err: err}
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		switch {
		case v == cgroups.V1 && h.V1Mounts[c] != "":
			p.Controllers = append(p.Controllers, c)
		case v == cgroups.V2 && slices.Contains(h.V2Controllers, c):
			p.Controllers = append(p.Controllers, c)
		}
	}
	return hostcheck.Cgroups(mounts, p)
}

// checkOverlay mounts an overlay inside a new user and mount namespace
// (unshare -Urm, from util-linux) over temporary directories, writes through
// it, and checks that the write reached the upper directory.
func checkOverlay(ctx context.Context) hostcheck.Result {
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: unshare (util-linux) not found", Fix: "apt-get install util-linux"}
	}
	dir, err := os.MkdirTemp("", "tent-doctor-overlay-")
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: " + err.Error()}
	}
	defer removeProbeDir(dir)
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: " + err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	const script = `mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" "$1/merged" && echo ok >"$1/merged/probe"`
	out, err := exec.CommandContext(ctx, unshare, "-Urm", "sh", "-c", script, "sh", dir).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err != nil {
		if msg == "" {
			msg = err.Error()
		}
		res := hostcheck.Result{Status: hostcheck.Missing, Detail: "unshare -Urm + mount -t overlay: " + msg}
		switch {
		case strings.HasPrefix(msg, "unshare:"):
			res.Detail = "cannot create a user namespace to probe in: " + msg
			res.Fix = "make user namespaces available (see " + CheckUserNS + ")"
		case strings.Contains(msg, "unknown filesystem type"):
			res.Fix = "modprobe overlay (and add overlay to /etc/modules)"
		default:
			res.Fix = "boot Linux 5.11 or newer (overlayfs in user namespaces); without it, cow mounts are unavailable"
		}
		return res
	}
	if _, err := os.Stat(filepath.Join(dir, "upper", "probe")); err != nil {
		return hostcheck.Result{Status: hostcheck.Missing, Detail: "overlay mounted, but a write did not reach the upper directory: " + err.Error()}
	}
	return hostcheck.Result{Status: hostcheck.Available, Detail: "mounted and written in a user namespace (upper on " + os.TempDir() + ")"}
}

// checkIDMap, as root, clones a detached mount of a temporary directory
// (open_tree with OPEN_TREE_CLONE) and idmaps it (mount_setattr with
// MOUNT_ATTR_IDMAP) with the user namespace of a short-lived child.
// Unprivileged callers map their own uid and do not need idmapped mounts.
func checkIDMap(ctx context.Context) hostcheck.Result {
	if os.Geteuid() != 0 {
		return hostcheck.Result{Status: hostcheck.Available, Detail: "not needed (unprivileged callers map their own uid)"}
	}
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: " + err.Error()}
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
		return hostcheck.Result{Status: hostcheck.Missing, Detail: "cannot create a user namespace for the mapping: " + err.Error(), Fix: "make user namespaces available (see " + CheckUserNS + ")"}
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	nsPath := fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid)
	nsFD, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: " + (&os.PathError{Op: "open", Path: nsPath, Err: err}).Error()}
	}
	defer unix.Close(nsFD)

	dir, err := os.MkdirTemp("", "tent-doctor-idmap-")
	if err != nil {
		return hostcheck.Result{Status: hostcheck.Unknown, Detail: "cannot probe: " + err.Error()}
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
	return hostcheck.Result{Status: hostcheck.Available, Detail: fmt.Sprintf("open_tree + mount_setattr(MOUNT_ATTR_IDMAP) work on %s (%s); support is per filesystem", os.TempDir(), fsType)}
}

// idmapFailure explains a failed idmapped-mount syscall.
func idmapFailure(call string, err error, dir, fsType string) hostcheck.Result {
	var errno syscall.Errno
	name := ""
	if errors.As(err, &errno) {
		name = " (" + unix.ErrnoName(errno) + ")"
	}
	res := hostcheck.Result{Status: hostcheck.Missing, Detail: fmt.Sprintf("%s on %s (%s): %v%s", call, dir, fsType, err, name)}
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
