package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// testRange is the id range of these tests: ids 0-65535 inside are
// 3000000-3065535 on the host (no user of this machine).
var testRange = &sandbox.IDRange{Host: 3_000_000, Size: 65536}

// imageRoot is a busybox root made like an image's layer: root-owned
// system directories, a directory and a file of the image's own user 101
// (as nginx's /var/cache/nginx), a root-owned file only root may write.
func imageRoot(t *testing.T) string {
	t.Helper()
	root := busyboxRoot(t)
	for _, n := range []string{"id", "stat", "mkdir", "rm", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(root, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "page"), []byte("cached\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "shadow"), []byte("root:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{cache, filepath.Join(cache, "page")} {
		if err := os.Chown(p, 101, 101); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// With an id range, an image's users keep their ids: the container's
// root writes root's directories, the image's user 101 writes its own
// and nothing of root's, a command may run as any user of the range with
// supplementary groups, what each writes lands on disk under its own id,
// and on the host every process runs as the range's id, never root.
func TestIDRangeKeepsAnImagesUsers(t *testing.T) {
	if !privileged() {
		t.Skip("an id range needs root (TestIDRangeRefused checks the refusal)")
	}
	root := imageRoot(t)
	skipWithoutIdmap(t, root, sandbox.ReadWrite)
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{
		Filesystem: sandbox.Filesystem{Root: &sandbox.Root{Path: root}},
		Identity:   sandbox.Identity{IDRange: testRange, Env: []string{"PATH=/bin"}},
	}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	exec := func(u *sandbox.User, script string) string {
		t.Helper()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}, User: u})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	}
	// Inside, owners are as on disk.
	if got, want := exec(nil, "id -u; stat -c %u:%g / /cache /cache/page /etc/shadow"), "0\n0:0\n101:101\n101:101\n0:0"; got != want {
		t.Errorf("root's view: %q, want %q", got, want)
	}
	// Root writes root's directory; on disk the file is root's.
	if got := exec(nil, "echo r > /by-root && cat /etc/shadow"); got != "root:x" {
		t.Errorf("root: %q", got)
	}
	checkOwner(t, filepath.Join(root, "by-root"), 0, 0)
	// User 101, with group 1234: its own directory is writable, root's
	// are not (EACCES), nor is /etc/shadow readable.
	u101 := &sandbox.User{UID: 101, GID: 101, Groups: []uint32{1234, 5}}
	if got, want := exec(u101, "id -u; id -G; echo n > /cache/new && echo new-ok; echo x > /cache/page && echo page-ok"), "101\n101 5 1234\nnew-ok\npage-ok"; got != want {
		t.Errorf("user 101: %q, want %q", got, want)
	}
	checkOwner(t, filepath.Join(root, "cache", "new"), 101, 101)
	got := exec(u101, "touch /by-101; cat /etc/shadow; echo done")
	if !strings.Contains(got, "touch: /by-101: Permission denied") || !strings.Contains(got, "cat: can't open '/etc/shadow': Permission denied") {
		t.Errorf("user 101 wrote root's / or read /etc/shadow: %q", got)
	}
	// On the host, a command of user 101 is the range's 3000101, with no
	// capability.
	job, err := sb.Start(ctx, sandbox.ExecRequest{Args: []string{"sleep", "60"}, User: u101})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Wait()
	defer job.Signal(syscall.SIGKILL)
	status := hostStatus(t, "sleep", int(testRange.Host)+101)
	for _, want := range []string{"\nUid:\t3000101\t3000101\t3000101\t3000101\n", "\nGid:\t3000101\t", "\nCapEff:\t0000000000000000\n", "\nGroups:\t3000005 3001234 \n"} {
		if !strings.Contains(status, want) {
			t.Errorf("host status of user 101's command lacks %q:\n%s", strings.TrimSpace(want), status)
		}
	}
	// Ids outside the range, and AsRoot with a user, are refused.
	for _, req := range []sandbox.ExecRequest{
		{Args: []string{"true"}, User: &sandbox.User{UID: 70000}},
		{Args: []string{"true"}, User: &sandbox.User{UID: 1, GID: 1, Groups: []uint32{65536}}},
		{Args: []string{"true"}, User: &sandbox.User{UID: 1}, AsRoot: true},
	} {
		if _, err := sb.Exec(ctx, req); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("exec as %+v (AsRoot %v): %v, want ErrInvalidSpec", *req.User, req.AsRoot, err)
		}
	}
}

// hostStatus returns /proc/PID/status of the host process named comm
// whose real uid is uid.
func hostStatus(t *testing.T, comm string, uid int) string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		s := string(b)
		if strings.HasPrefix(s, "Name:\t"+comm+"\n") && strings.Contains(s, fmt.Sprintf("\nUid:\t%d\t", uid)) {
			return s
		}
	}
	t.Fatalf("no host process %s of uid %d", comm, uid)
	return ""
}

// checkOwner checks path's on-disk owner.
func checkOwner(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: owned by %d:%d on disk, want %d:%d", path, st.Uid, st.Gid, uid, gid)
	}
}

// A range that would include host root, is empty, or wraps, and groups
// or a user outside it, are refused, naming the field, before anything
// starts; an unprivileged caller cannot map a range.
func TestIDRangeRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		id   sandbox.Identity
		want string
	}{
		{sandbox.Identity{IDRange: &sandbox.IDRange{Host: 0, Size: 65536}}, "id_range.host: 0 would map host root"},
		{sandbox.Identity{IDRange: &sandbox.IDRange{Host: 100000, Size: 0}}, "id_range.size: 0"},
		{sandbox.Identity{IDRange: &sandbox.IDRange{Host: 4294967000, Size: 65536}}, "id_range: host ids 4294967000 to"},
		{sandbox.Identity{IDRange: testRange, User: &sandbox.User{UID: 65536}}, "user: 65536:0 is outside id_range"},
		{sandbox.Identity{IDRange: testRange, User: &sandbox.User{Groups: []uint32{70000}}}, "user.groups[0]: 70000 is outside id_range"},
		{sandbox.Identity{User: &sandbox.User{Groups: []uint32{5}}}, "user.groups: supplementary groups need id_range"},
	} {
		_, err := sandbox.Provision(ctx, sandbox.Spec{Identity: tc.id}, sandbox.ProvisionOptions{})
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalidSpec with %q", tc.id, err, tc.want)
		}
	}
	if privileged() {
		return
	}
	_, err := sandbox.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{IDRange: testRange}}, sandbox.ProvisionOptions{})
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || ue.Missing[0].Protection != "id_range" {
		t.Errorf("unprivileged id_range: %v, want an UnsupportedError for id_range", err)
	}
}

// Capabilities a sandbox keeps are its commands', in its own user
// namespace only: with CAP_DAC_OVERRIDE a command reads its own file of
// mode 000, and with CAP_CHOWN root of an id range gives a file to
// another id of the range; without them, it can do neither. A
// capability that is not granted (CAP_SYS_ADMIN) is refused, naming the
// field.
func TestCapabilitiesStayInTheSandbox(t *testing.T) {
	ctx := context.Background()
	_, err := sandbox.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Capabilities: []string{"NET_BIND_SERVICE", "CAP_SYS_ADMIN"}}}, sandbox.ProvisionOptions{})
	if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "capabilities[1]: CAP_SYS_ADMIN is not granted") {
		t.Errorf("CAP_SYS_ADMIN: %v, want ErrInvalidSpec naming capabilities[1]", err)
	}
	caps := []string{"dac_override", "CAP_CHOWN"}
	spec := sandbox.Spec{Identity: sandbox.Identity{Capabilities: caps, AmbientCapabilities: caps}}
	chown := "echo chown=skipped"
	if privileged() {
		spec.IDRange = testRange
		chown = "touch /tmp/f$$ && chown 1000:1000 /tmp/f$$ 2>/dev/null; echo chown=$?"
	}
	sb, err := sandbox.Provision(ctx, withProbe(t, spec), sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	script := "grep CapEff /proc/self/status; " + chown + "; echo x > /tmp/m$$; chmod 000 /tmp/m$$; cat /tmp/m$$ >/dev/null 2>&1; echo read=$?"
	for _, tc := range []struct {
		caps []string
		want string
	}{
		{nil, "CapEff:\t0000000000000003\nchown=0\nread=0\n"},
		{[]string{}, "CapEff:\t0000000000000000\nchown=1\nread=1\n"},
	} {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Capabilities: tc.caps, AmbientCapabilities: tc.caps})
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if !privileged() {
			want = strings.Replace(strings.Replace(want, "chown=0", "chown=skipped", 1), "chown=1", "chown=skipped", 1)
		}
		if got := string(res.Stdout); got != want {
			t.Errorf("capabilities %v: %q (stderr %q), want %q", tc.caps, got, res.Stderr, want)
		}
	}
	if !privileged() {
		return
	}
	// Not ambient: held by uid 0 only, as runc gives an OCI process's
	// sets (a user's command exec'd without them holds none).
	for _, tc := range []struct {
		user *sandbox.User
		want string
	}{{nil, "CapEff:\t0000000000000003"}, {&sandbox.User{UID: 101, GID: 101}, "CapEff:\t0000000000000000"}} {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"grep", "CapEff", "/proc/self/status"}, User: tc.user, Capabilities: caps, AmbientCapabilities: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(res.Stdout)); got != tc.want {
			t.Errorf("user %+v, capabilities not ambient: %q, want %q", tc.user, got, tc.want)
		}
	}
}

// A root whose files are in the range's host ids already (containerd's
// own shifted snapshot of a user-namespaced pod) is bound as it is, not
// idmapped a second time: inside, owners are as in the image.
func TestIDRangeRootAlreadyShifted(t *testing.T) {
	if !privileged() {
		t.Skip("an id range needs root")
	}
	root := imageRoot(t)
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		return os.Lchown(p, int(testRange.Host+st.Uid), int(testRange.Host+st.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Root: &sandbox.Root{Path: root}}, Identity: sandbox.Identity{IDRange: testRange, Env: []string{"PATH=/bin"}}},
		"sh", "-c", "stat -c %u:%g /etc /cache; touch /etc/made && echo made")
	if want := "0:0\n101:101\nmade"; out != want {
		t.Errorf("inside a shifted root: %q, want %q", out, want)
	}
	checkOwner(t, filepath.Join(root, "etc", "made"), testRange.Host, testRange.Host)
}
