package sandbox_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestHostSecretsStayUnreadable(t *testing.T) {
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Skip("no /etc/shadow on this host")
	}
	expect(t, "read /etc/shadow", probe(t, sandbox.Spec{}, "open", "/etc/shadow", "r"), "EACCES")
	out, _, _ := run(t, sandbox.Spec{}, "cat", "/etc/shadow")
	if out != "" {
		t.Fatalf("/etc/shadow leaked: %q", out)
	}
}

func TestIdentityInside(t *testing.T) {
	want := strconv.Itoa(os.Getuid())
	if privileged() {
		want = "0" // root inside, an unprivileged id outside
	}
	expect(t, "uid inside", mustRun(t, sandbox.Spec{}, "id", "-u"), want)
	expect(t, "--user 1234:5678", mustRun(t, sandbox.Spec{User: &sandbox.User{UID: 1234, GID: 5678}}, "sh", "-c", "echo $(id -u):$(id -g)"), "1234:5678")
}

func TestRootCallerNeverHoldsHostRoot(t *testing.T) {
	if !privileged() {
		t.Skip("needs a root caller")
	}
	// The sandbox runs as an unprivileged host id: its processes are not
	// root's on the host.
	out := mustRun(t, sandbox.Spec{}, "sh", "-c", "cat /proc/self/uid_map")
	var inside, outside, n int
	if _, err := fmtSscan(out, &inside, &outside, &n); err != nil || outside == 0 || n != 1 {
		t.Fatalf("uid_map %q: the sandbox maps to host root or more than one id", out)
	}
}

func TestReadWriteMountKeepsHostOwnership(t *testing.T) {
	dir := rwDir(t) // owned by the caller: root in the privileged run
	os.Chmod(dir, 0o755)
	spec := sandbox.Spec{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}
	mustRun(t, spec, "sh", "-c", "echo data > /out/new && mkdir /out/sub")
	for _, name := range []string{"new", "sub"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
			t.Errorf("%s is owned by %d:%d on the host, want the caller %d:%d", name, st.Uid, st.Gid, os.Getuid(), os.Getgid())
		}
	}
}

func TestRootReadWriteMountOfAnotherOwnerIsRefused(t *testing.T) {
	if !privileged() {
		t.Skip("needs a root caller")
	}
	dir := rwDir(t)
	if err := os.Chown(dir, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}, "true")
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || !containsAll(err.Error(), "uid 4321", "--user 4321:4321") {
		t.Fatalf("got %v, want a refusal that says to run with --user 4321:4321", err)
	}
	// ... and with that identity it works, files owned by 4321 on disk.
	spec := sandbox.Spec{User: &sandbox.User{UID: 4321, GID: 4321}, Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}
	mustRun(t, spec, "touch", "/out/f")
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 {
		t.Errorf("file owned by %d, want 4321", st.Uid)
	}
}
