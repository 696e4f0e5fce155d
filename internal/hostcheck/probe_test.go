package hostcheck

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/cgroups"
)

func TestHostCheckUserNSVerdict(t *testing.T) {
	probeErr := errors.New("clone(CLONE_NEWUSER|CLONE_NEWNS): operation not permitted (EPERM)")
	ok := Result{Status: Available, Detail: "no sysctl restricts user namespaces"}
	blocked := Result{Status: Missing, Detail: "kernel.unprivileged_userns_clone=0", Fix: "sysctl -w kernel.unprivileged_userns_clone=1"}
	rootBlocked := Result{Status: Missing, Detail: "user.max_user_namespaces=0", Fix: "sysctl -w user.max_user_namespaces=15000"}
	for _, c := range []struct {
		name         string
		privileged   bool
		probeErr     error
		unpriv, root Result
		want         Result
	}{
		{"root, all open", true, nil, ok, ok,
			Result{Status: Available, Detail: "root can create them (probe ok); unprivileged users can too (no sysctl restricts them)"}},
		{"root, unprivileged blocked", true, nil, blocked, ok,
			Result{Status: Available, Detail: "root can create them (probe ok); unprivileged users cannot: kernel.unprivileged_userns_clone=0",
				Fix: "to let unprivileged users run tent: sysctl -w kernel.unprivileged_userns_clone=1"}},
		{"root, probe failed", true, probeErr, blocked, rootBlocked,
			Result{Status: Missing, Detail: "probe as root failed: " + probeErr.Error() + "; user.max_user_namespaces=0", Fix: rootBlocked.Fix}},
		{"user, all open", false, nil, ok, Result{},
			Result{Status: Available, Detail: "probe ok; no sysctl restricts user namespaces"}},
		{"user, probe failed, sysctl blocks", false, probeErr, blocked, Result{},
			Result{Status: Missing, Detail: "probe failed: " + probeErr.Error() + "; kernel.unprivileged_userns_clone=0", Fix: blocked.Fix}},
		{"user, probe failed, no sysctl blocks", false, probeErr, ok, Result{},
			Result{Status: Missing, Detail: "probe failed: " + probeErr.Error()}},
		{"user, probe ok though a sysctl blocks (AppArmor)", false, nil, blocked, Result{},
			Result{Status: Degraded, Detail: "probe ok, but kernel.unprivileged_userns_clone=0; tent needs an AppArmor profile that allows its binary", Fix: blocked.Fix}},
	} {
		if got := userNSVerdict(c.privileged, c.probeErr, c.unpriv, c.root); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestHostCheckWithReducedTier(t *testing.T) {
	missing := Result{Status: Missing, Detail: "probe failed", Fix: "f"}
	if got := withReducedTier(missing); got != (Result{Status: Missing, Detail: "probe failed; " + reducedTierNote, Fix: "f"}) {
		t.Errorf("missing: %+v", got)
	}
	for _, r := range []Result{{Status: Available, Detail: "ok"}, {Status: Degraded, Detail: "d"}, {Status: Unknown, Detail: "u"}} {
		if got := withReducedTier(r); got != r {
			t.Errorf("%s: %+v, want it unchanged", r.Status, got)
		}
	}
}

func TestHostCheckOverlayFailure(t *testing.T) {
	for msg, want := range map[string]Result{
		"unshare: unshare failed: Operation not permitted": {Status: Missing,
			Detail: "cannot create a user namespace to probe in: unshare: unshare failed: Operation not permitted",
			Fix:    "make user namespaces available (see user namespaces)"},
		"mount: /tmp/x/merged: unknown filesystem type 'overlay'.": {Status: Missing,
			Detail: "unshare -Urm + mount -t overlay: mount: /tmp/x/merged: unknown filesystem type 'overlay'.",
			Fix:    "modprobe overlay (and add overlay to /etc/modules)"},
		"mount: /tmp/x/merged: permission denied.": {Status: Missing,
			Detail: "unshare -Urm + mount -t overlay: mount: /tmp/x/merged: permission denied.",
			Fix:    "boot Linux 5.11 or newer (overlayfs in user namespaces); without it, cow mounts are unavailable"},
	} {
		if got := overlayFailure(msg); got != want {
			t.Errorf("%q:\n got %+v\nwant %+v", msg, got, want)
		}
	}
}

func TestHostCheckIDMapFailure(t *testing.T) {
	for _, c := range []struct {
		err         error
		detail, fix string
	}{
		{syscall.ENOSYS, "mount_setattr(MOUNT_ATTR_IDMAP) on /tmp/d (ext4): function not implemented (ENOSYS)",
			"boot Linux 5.12 or newer (mount_setattr)"},
		{syscall.EINVAL, "mount_setattr(MOUNT_ATTR_IDMAP) on /tmp/d (ext4): invalid argument (EINVAL)",
			"use a filesystem that supports idmapped mounts for rw mounts as root (ext4, xfs, btrfs: 5.12-5.15; tmpfs: 6.3), or run tent as an unprivileged user"},
		{os.NewSyscallError("mount_setattr", syscall.EPERM), "mount_setattr(MOUNT_ATTR_IDMAP) on /tmp/d (ext4): mount_setattr: operation not permitted (EPERM)",
			"run tent as an unprivileged user, whose uid maps to itself without idmapped mounts"},
		{errors.New("odd"), "mount_setattr(MOUNT_ATTR_IDMAP) on /tmp/d (ext4): odd",
			"run tent as an unprivileged user, whose uid maps to itself without idmapped mounts"},
	} {
		want := Result{Status: Missing, Detail: c.detail, Fix: c.fix}
		if got := idmapFailure("mount_setattr(MOUNT_ATTR_IDMAP)", c.err, "/tmp/d", "ext4"); got != want {
			t.Errorf("%v:\n got %+v\nwant %+v", c.err, got, want)
		}
	}
}

func TestHostCheckFSTypeName(t *testing.T) {
	for magic, want := range map[int64]string{0xef53: "ext4", 0x58465342: "xfs", 0x9123683e: "btrfs", 0x01021994: "tmpfs", 0x794c7630: "overlayfs", 0x1234: "fs magic 0x1234"} {
		if got := fsTypeName(magic); got != want {
			t.Errorf("fsTypeName(%#x) = %q, want %q", magic, got, want)
		}
	}
}

// children lists the pids of this process's children.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err == nil {
			out = append(out, strings.Fields(string(data))...)
		}
	}
	return out
}

// noLeftovers points TMPDIR at an empty directory for the test and
// checks, when it ends, that the probes left neither files there nor
// child processes.
func noLeftovers(t *testing.T) {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	before := children(t)
	t.Cleanup(func() {
		if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
			t.Errorf("the probes left %v in their temporary directory (err %v)", left, err)
		}
		for _, pid := range children(t) {
			if !slices.Contains(before, pid) {
				t.Errorf("the probes left child process %s running", pid)
			}
		}
	})
}

// The live probes on this host (tent's test hosts have user namespaces
// and overlayfs in them).
func TestHostCheckProbesThisHost(t *testing.T) {
	noLeftovers(t)
	ctx := context.Background()
	root := os.Geteuid() == 0
	userns := ProbeUserNS(ctx, "/proc")
	wantUserNS := "probe ok"
	if root {
		wantUserNS = "root can create them (probe ok)"
	}
	if userns.Status != Available || !strings.Contains(userns.Detail, wantUserNS) {
		t.Errorf("ProbeUserNS = %+v, want available with %q", userns, wantUserNS)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		if r := ProbeOverlay(ctx); r != (Result{Status: Unknown, Detail: "cannot probe: unshare (util-linux) not found", Fix: "apt-get install util-linux"}) {
			t.Errorf("ProbeOverlay without unshare = %+v", r)
		}
	} else if r := ProbeOverlay(ctx); r.Status != Available || r.Detail != "mounted and written in a user namespace (upper on "+os.TempDir()+")" {
		t.Errorf("ProbeOverlay = %+v", r)
	}
	idmap := ProbeIDMap(ctx)
	switch {
	case !root && idmap != (Result{Status: Available, Detail: "not needed (unprivileged callers map their own uid)"}):
		t.Errorf("ProbeIDMap unprivileged = %+v", idmap)
	case root && idmap.Status == Missing:
		// A filesystem that cannot be idmapped (tmpfs before Linux 6.3).
		if !strings.HasPrefix(idmap.Detail, "mount_setattr(MOUNT_ATTR_IDMAP) on "+os.TempDir()+"/tent-doctor-idmap-") || idmap.Fix == "" {
			t.Errorf("ProbeIDMap as root = %+v", idmap)
		}
		t.Logf("idmapped mounts unavailable here: %s", idmap.Detail)
	case root && (idmap.Status != Available || !strings.HasPrefix(idmap.Detail, "open_tree + mount_setattr(MOUNT_ATTR_IDMAP) work on "+os.TempDir()+" (")):
		t.Errorf("ProbeIDMap as root = %+v", idmap)
	}
	if r := ProbeSeccomp("/proc"); r.Status != Available {
		t.Errorf("ProbeSeccomp = %+v", r)
	}
	if r := ProbeKernel(); r.Status != Available || !strings.HasPrefix(r.Detail, "Linux ") {
		t.Errorf("ProbeKernel = %+v", r)
	}
}

// ProbeCgroups asks its canCreate of the host cgroups.Detect finds, and
// lists the controllers of the version it answers.
func TestHostCheckProbeCgroups(t *testing.T) {
	h, err := cgroups.Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var asked *cgroups.Host
	refused := errors.New("no cgroup for you")
	r := ProbeCgroups("/proc", func(got *cgroups.Host) (cgroups.Version, error) { asked = got; return cgroups.V2, refused })
	if asked == nil || asked.Mode != h.Mode {
		t.Fatalf("canCreate asked of %+v, want the detected host (mode %s)", asked, h.Mode)
	}
	if r.Status != Degraded || !strings.HasPrefix(r.Detail, h.Mode.String()) || !strings.Contains(r.Detail, "cannot create a sandbox cgroup: no cgroup for you") || r.Fix != CgroupFixV2 {
		t.Errorf("refused: %+v", r)
	}
	if len(h.V1Mounts) > 0 {
		r = ProbeCgroups("/proc", func(*cgroups.Host) (cgroups.Version, error) { return cgroups.V1, nil })
		var want []string
		for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
			if h.V1Mounts[c] != "" {
				want = append(want, c)
			}
		}
		if r.Status != Available || !strings.HasSuffix(r.Detail, "this user can create v1 sandbox cgroups with "+strings.Join(want, ", ")) {
			t.Errorf("v1: %+v, want the controllers %q", r, want)
		}
	}
}

// A done context skips the live probes, without leftovers.
func TestHostCheckProbesCanceled(t *testing.T) {
	noLeftovers(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	notProbed := Result{Status: Unknown, Detail: "not probed: context canceled"}
	if r := ProbeUserNS(ctx, "/proc"); r != notProbed {
		t.Errorf("ProbeUserNS = %+v", r)
	}
	if r := ProbeOverlay(ctx); r != notProbed {
		t.Errorf("ProbeOverlay = %+v", r)
	}
	if r := ProbeIDMap(ctx); os.Geteuid() == 0 && r != notProbed {
		t.Errorf("ProbeIDMap = %+v", r)
	}
}
