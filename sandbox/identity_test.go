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
	expect(t, "--user 1234:5678", mustRun(t, sandbox.Spec{Identity: sandbox.Identity{User: &sandbox.User{UID: 1234, GID: 5678}}}, "sh", "-c", "echo $(id -u):$(id -g)"), "1234:5678")
	// A named user: $USER, and a private writable home /home/NAME, as
	// E2B's sandboxes have.
	named := sandbox.Spec{Identity: sandbox.Identity{User: &sandbox.User{UID: 1000, GID: 1000, Name: "user"}, Workdir: "/home/user"}}
	expect(t, "a named user", mustRun(t, named, "sh", "-c", `touch $HOME/f && echo $(id -u) $USER $HOME $(pwd) $(stat -c %u $HOME/f)`), "1000 user /home/user /home/user 1000")
	if _, _, err := run(t, sandbox.Spec{Identity: sandbox.Identity{User: &sandbox.User{UID: 1000, Name: "../x"}}}, "true"); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("user name ../x: %v, want ErrInvalidSpec", err)
	}
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

// Files a sandbox writes to an rw mount belong on the host to the
// directory's owner: the caller itself when unprivileged; for root, the
// directory's (non-root) owner, onto which tent idmaps the sandbox's
// user — never root (see TestRootReadWriteMountMapsOwner).
func TestReadWriteMountKeepsHostOwnership(t *testing.T) {
	dir := rwDir(t) // the caller's; as root, sandboxOwner's
	os.Chmod(dir, 0o755)
	owner, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := owner.Sys().(*syscall.Stat_t)
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}}
	mustRun(t, spec, "sh", "-c", "echo data > /out/new && mkdir /out/sub")
	for _, name := range []string{"new", "sub"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want.Uid || st.Gid != want.Gid || st.Uid == 0 {
			t.Errorf("%s is owned by %d:%d on the host, want the directory's owner %d:%d", name, st.Uid, st.Gid, want.Uid, want.Gid)
		}
	}
}
