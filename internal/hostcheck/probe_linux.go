package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
)

// The probe runners: each looks at the live host (system calls, short
// child processes, a detached mount) and turns what it saw into a Result
// with the pure functions of this package. They change nothing lasting
// and leave no process or temporary directory behind; cancelling ctx
// kills a running probe, and a probe not yet started when ctx is done
// reports Unknown.

// probeTimeout bounds each live probe.
const probeTimeout = 10 * time.Second

// userNSCheck is the name under which tent doctor reports user
// namespaces, which other checks' fixes point to.
const userNSCheck = "user namespaces"

// reducedTierNote is what a missing user namespace check adds: what tent
// run does instead.
const reducedTierNote = "tent run uses the reduced tier (no namespaces; Landlock, seccomp, no_new_privs, rlimits or a cgroup; network none through seccomp) and refuses policies that need more unless --best-effort; tent create is unavailable"

// withReducedTier adds reducedTierNote to a missing user namespace check.
func withReducedTier(r Result) Result {
	if r.Status == Missing {
		r.Detail += "; " + reducedTierNote
	}
	return r
}

// notProbed is the result of a live probe skipped because ctx is done.
func notProbed(err error) Result {
	return Result{Status: Unknown, Detail: "not probed: " + err.Error()}
}

// ProbeUserNS creates a user and mount namespace (running /bin/true in
// them, this process's uid and gid mapped to root inside, as tent's init
// would be) and reads the sysctls under procRoot that decide it for
// unprivileged users. A Missing result says what tent run does instead
// (the reduced tier).
func ProbeUserNS(ctx context.Context, procRoot string) Result {
	if err := ctx.Err(); err != nil {
		return notProbed(err)
	}
	probeErr := probeUserNS(ctx)
	privileged := os.Geteuid() == 0
	var root Result
	if privileged {
		root = UserNSForRoot(procRoot)
	}
	return withReducedTier(userNSVerdict(privileged, probeErr, UserNS(procRoot), root))
}

// userNSVerdict combines the probe's outcome (probeErr) with the sysctls'
// verdict for unprivileged users (unpriv) and, for a privileged caller,
// for root (root).
func userNSVerdict(privileged bool, probeErr error, unpriv, root Result) Result {
	if privileged {
		if probeErr != nil {
			return Result{Status: Missing, Detail: "probe as root failed: " + probeErr.Error() + "; " + root.Detail, Fix: root.Fix}
		}
		res := Result{Status: Available, Detail: "root can create them (probe ok)"}
		if unpriv.Status == Available {
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
		if unpriv.Status != Available {
			d += "; " + unpriv.Detail
		}
		return Result{Status: Missing, Detail: d, Fix: unpriv.Fix}
	case unpriv.Status == Missing:
		// Only AppArmor's restriction lets the probe through: a profile
		// allows this process, or the namespace was created without
		// capabilities.
		return Result{Status: Degraded, Detail: "probe ok, but " + unpriv.Detail + "; tent needs an AppArmor profile that allows its binary", Fix: unpriv.Fix}
	}
	return Result{Status: Available, Detail: "probe ok; " + unpriv.Detail}
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

// ProbeLandlock asks the kernel for its Landlock ABI (see [Landlock];
// sysRoot is where the lsm= list is read).
func ProbeLandlock(sysRoot string) Result {
	abi, err := fs.LandlockABI()
	return Landlock(abi, err, sysRoot)
}

// ProbeSeccomp asks the kernel whether it has seccomp (prctl
// PR_GET_SECCOMP) and reads its filter actions under procRoot (see
// [Seccomp]).
func ProbeSeccomp(procRoot string) Result {
	_, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		err = os.NewSyscallError("prctl", err)
	}
	return Seccomp(procRoot, err)
}

// ProbeKernel reports the running kernel's release (see [Kernel]).
func ProbeKernel() Result {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Result{Status: Unknown, Detail: "uname: " + err.Error()}
	}
	return Kernel(unix.ByteSliceToString(u.Release[:]))
}

// ProbeCgroups reports the cgroup mode (from procRoot/self/mountinfo) and
// whether this user can create a sandbox cgroup, as canCreate says for the
// host [cgroups.Detect] finds (tent's own rule, which may look beyond
// [cgroups.CanCreate]), and with which of the controllers tent uses.
func ProbeCgroups(procRoot string, canCreate func(*cgroups.Host) (cgroups.Version, error)) Result {
	f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Result{Status: Unknown, Detail: err.Error()}
	}
	mounts, err := CgroupMode(f)
	f.Close()
	if err != nil {
		return Result{Status: Unknown, Detail: err.Error()}
	}
	h, err := cgroups.Detect(procRoot)
	if err != nil {
		return Cgroups(mounts, CgroupProbe{Err: err})
	}
	v, err := canCreate(h)
	p := CgroupProbe{Version: v.String(), Err: err}
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		switch {
		case v == cgroups.V1 && h.V1Mounts[c] != "":
			p.Controllers = append(p.Controllers, c)
		case v == cgroups.V2 && slices.Contains(h.V2Controllers, c):
			p.Controllers = append(p.Controllers, c)
		}
	}
	return Cgroups(mounts, p)
}
