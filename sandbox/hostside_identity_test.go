//go:build linux

package sandbox_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// owner is who owns a directory a writable mount binds.
type owner struct {
	name     string
	uid, gid uint32
}

// hostsideOwners are the owners of the directories the attacks below go
// through: an unprivileged caller's own; for a root caller, a made-up
// non-root owner (4321:4321, which tent maps onto the sandbox's user) and
// root itself (a root-owned directory is written as root).
func hostsideOwners() []owner {
	if !privileged() {
		return []owner{{"own", uint32(os.Getuid()), uint32(os.Getgid())}}
	}
	return []owner{{"user-owned", 4321, 4321}, {"root-owned", 0, 0}}
}

// forEachOwner runs f in a subtest per hostsideOwners entry, with a
// fresh directory of that owner for a writable mount.
func forEachOwner(t *testing.T, f func(t *testing.T, dir string, uid, gid uint32)) {
	for _, o := range hostsideOwners() {
		dir := t.TempDir() // the parent's: a sandbox may keep every subtest's mount
		t.Run(o.name, func(t *testing.T) {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if privileged() {
				if err := os.Chown(dir, int(o.uid), int(o.gid)); err != nil {
					t.Fatal(err)
				}
				skipWithoutIdmap(t, dir, sandbox.ReadWrite)
			}
			f(t, dir, o.uid, o.gid)
		})
	}
}

// checkHostFiles asserts that every entry under dir is owned by uid:gid
// and has neither S_ISUID nor S_ISGID, and that the entries are exactly
// want (so a denied creation left nothing behind).
func checkHostFiles(t *testing.T, dir string, uid, gid uint32, want ...string) {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		names = append(names, strings.TrimPrefix(path, dir+"/"))
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Errorf("%s has mode %#o on the host: a set-id bit", path, st.Mode)
		}
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d on the host, want %d:%d", path, st.Uid, st.Gid, uid, gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("host directory holds %q, want %q", names, want)
	}
}

// checkSetIDAttempts asserts the helper's results against setIDAttempts.
func checkSetIDAttempts(t *testing.T, out string) {
	t.Helper()
	got := helperResults(t, out)
	for _, a := range setIDAttempts {
		if got[a.name] != a.want {
			t.Errorf("%s inside: %q, want %q", a.name, got[a.name], a.want)
		}
	}
}

// setIDFiles are the host entries the helper's "setid" leaves: its
// controls, the directory and the os.Root file.
var setIDFiles = []string{"ctl", "victim", "dir", "viaroot"}

// TestSetIDFromInsideIsDenied plants set-uid and set-gid files through an
// rw mount, by every call that sets a mode: each is EPERM (openat2
// ENOSYS), nothing is left behind, and on the host every file has no
// set-id bit and the owner the sandbox was given (never root).
func TestSetIDFromInsideIsDenied(t *testing.T) {
	forEachOwner(t, func(t *testing.T, dir string, uid, gid uint32) {
		spec, helper := withHostsideHelper(t, sandbox.Spec{
			Filesystem: sandbox.Filesystem{
				Mounts: []sandbox.Mount{{Source: dir, Target: "/work", Access: sandbox.ReadWrite}},
			},
			Identity: sandbox.Identity{
				Env: []string{hostsideEnv + "=setid"},
			},
		})
		checkSetIDAttempts(t, mustRun(t, spec, helper, "/work"))

		// The same with the tools a script would use.
		spec.Env = nil
		script := `cd /work && cp /bin/true sh-t && chmod 755 sh-t && echo control $? &&
		chmod 6755 sh-t; echo 6755 $?; chmod u+s sh-t; echo u+s $?; chmod g+s dir; echo dir-g+s $?`
		want, eperms, files := "control 0\n6755 1\nu+s 1\ndir-g+s 1", 3, append(slices.Clone(setIDFiles), "sh-t")
		// install(1) where the host has it (the sandbox sees the host's
		// /usr): Debian does, the VM's busybox does not.
		if _, err := exec.LookPath("install"); err == nil {
			script += "\ninstall -m 4755 /bin/true sh-i; echo install $?"
			want, eperms, files = want+"\ninstall 1", eperms+1, append(files, "sh-i")
		}
		out, stderr, err := runStderr(t, spec, "sh", "-c", script)
		if err != nil {
			t.Fatalf("sh: %v (stdout %q)", err, out)
		}
		if out != want {
			t.Errorf("shell attempts printed %q, want %q", out, want)
		}
		if n := strings.Count(stderr, "Operation not permitted"); n != eperms {
			t.Errorf("stderr has %d EPERMs, want %d: %q", n, eperms, stderr)
		}
		checkHostFiles(t, dir, uid, gid, files...)
	})
}

// runStderr runs argv in a sandbox and returns its trimmed stdout and
// stderr.
func runStderr(t *testing.T, spec sandbox.Spec, argv ...string) (string, string, error) {
	t.Helper()
	cmd := sandbox.Command(context.Background(), spec, argv[0], argv[1:]...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String()), stderr.String(), err
}

// TestAttachedMountDeniesSetID makes the same attempts through a mount
// attached at runtime (what `tent mount` does).
func TestAttachedMountDeniesSetID(t *testing.T) {
	spec, helper := withHostsideHelper(t, sandbox.Spec{})
	sb := provision(t, spec)
	forEachOwner(t, func(t *testing.T, dir string, uid, gid uint32) {
		target := "/work-" + strconv.Itoa(int(uid))
		if err := sb.Mount(context.Background(), sandbox.Mount{Source: dir, Target: target, Access: sandbox.ReadWrite}); err != nil {
			t.Fatal(err)
		}
		out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{helper, target}, Env: []string{hostsideEnv + "=setid"}})
		if res.ExitCode != 0 {
			t.Fatalf("helper exited %d: %q", res.ExitCode, out)
		}
		checkSetIDAttempts(t, out)
		checkHostFiles(t, dir, uid, gid, setIDFiles...)
	})
}

// TestRootReadWriteMountMapsOwner checks a root caller's rw mounts: in a
// directory owned by someone else, what the sandbox creates is that
// owner's on the host, and group root becomes nogroup; in a root-owned
// one it is root's, as docker and bwrap write it. Inside, it is the
// sandbox user's whatever Spec.User says, and other ids cannot be chowned
// to.
func TestRootReadWriteMountMapsOwner(t *testing.T) {
	if !privileged() {
		t.Skip("a root caller's identity model: an unprivileged caller's sandbox writes as the caller, which TestSetIDFromInsideIsDenied checks")
	}
	for _, tc := range []struct {
		name             string
		user             *sandbox.User
		dirUID, dirGID   uint32
		fileUID, fileGID uint32
		insideU, insideG string
		dirGroupUnmapped bool
	}{
		{"default user", nil, 4321, 4321, 4321, 4321, "0", "0", false},
		{"--user 1234:5678", &sandbox.User{UID: 1234, GID: 5678}, 4321, 4321, 4321, 4321, "1234", "5678", false},
		{"group root", nil, 4321, 0, 4321, 65534, "0", "0", true},
		{"root-owned", nil, 0, 0, 0, 0, "0", "0", false},
		{"root-owned --user 1234:5678", &sandbox.User{UID: 1234, GID: 5678}, 0, 0, 0, 0, "1234", "5678", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chown(dir, int(tc.dirUID), int(tc.dirGID)); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, 0o755)
			skipWithoutIdmap(t, dir, sandbox.ReadWrite)
			spec := sandbox.Spec{Identity: sandbox.Identity{User: tc.user}, Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}}
			out := mustRun(t, spec, "sh", "-c", `echo data > /out/f && mkdir /out/d && ln -s f /out/l && stat -c '%u:%g' /out /out/f;
				chown 4321 /out/f 2>/dev/null; echo chown-4321 $?; chown 0:0 /out/f 2>/dev/null; echo chown-0 $?`)
			want := tc.insideU + ":" + tc.insideG
			var chownRoot string
			if tc.user == nil {
				chownRoot = "0" // already the sandbox user's 0:0 inside: a no-op
			} else {
				chownRoot = "1" // 0 is not mapped in the sandbox
			}
			if tc.dirGroupUnmapped {
				// The directory's group (on-disk 0) is unmapped inside.
				want = tc.insideU + ":65534\n" + tc.insideU + ":" + tc.insideG
			} else {
				want = want + "\n" + want
			}
			if exp := want + "\nchown-4321 1\nchown-0 " + chownRoot; out != exp {
				t.Errorf("inside: %q, want %q", out, exp)
			}
			checkHostFiles(t, dir, tc.fileUID, tc.fileGID, "f", "d", "l")
		})
	}
	// Written as root needs the default profile's set-id refusal: with
	// seccomp unconfined, a set-uid file left there would be host root's.
	root := t.TempDir()
	_, _, err := run(t, sandbox.Spec{Seccomp: sandbox.Seccomp{Unconfined: true}, Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: root, Target: "/out", Access: sandbox.ReadWrite}}}}, "true")
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || ue.Degradable || len(ue.Missing) != 1 || !strings.Contains(ue.Missing[0].Reason, "does not refuse set-id modes") ||
		!strings.Contains(ue.Missing[0].Fix, "default seccomp profile") || strings.Contains(err.Error(), sandbox.BestEffortHint) {
		t.Errorf("rw of a root-owned directory with seccomp unconfined: %v; want a refusal that best effort cannot lift", err)
	}
	// The children that made the idmappings' user namespaces are gone:
	// none is left, stopped or a zombie, under this process.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(string(b), "tent-idmap-userns\x00") {
			t.Errorf("%s: a user-namespace child is left", p)
		}
	}
}

// TestFileCapabilityFromInside tries to give a copy of cat file
// capabilities (cap_setuid,cap_setgid+ep, the security.capability xattr)
// through an rw mount. Writing one needs CAP_SETFCAP over the file, which
// a command never holds: under the default profile setxattr is EPERM;
// without seccomp too, and the way to gain it, a nested user namespace,
// fails as its maps cannot be written (Landlock denies writes to /proc:
// EACCES). Nothing reaches the host.
//
// In a non-root owner's directory, as root, it then shows why such a
// capability would be inert there anyway: the kernel would
// store it as a v3 capability whose rootid is the sandbox's root as seen
// through the mount, the directory's owner; a v3 capability counts only
// in a user namespace whose root is its rootid, so cat gains nothing on
// the host. With rootid 0, what a root-owned directory's mapping (on-disk
// 0 ↔ the sandbox's root) would store, it does gain them: there the
// refusals to write one are all that holds, and they are checked for a
// root-owned directory too.
func TestFileCapabilityFromInside(t *testing.T) {
	forEachOwner(t, func(t *testing.T, dir string, uid, gid uint32) {
		spec, helper := withHostsideHelper(t, sandbox.Spec{
			Filesystem: sandbox.Filesystem{
				Mounts: []sandbox.Mount{{Source: dir, Target: "/work", Access: sandbox.ReadWrite}},
			},
		})
		mustRun(t, spec, "cp", "/bin/cat", "/work/capcat")
		spec.Env = []string{hostsideEnv + "=setcap-inner"}
		expect(t, "setxattr security.capability under the default profile", mustRun(t, spec, helper, "/work/capcat"), "setxattr-security.capability EPERM")
		spec.Seccomp.Unconfined = true
		if privileged() && uid == 0 {
			// Written as root needs the default profile: refused.
			if _, _, err := run(t, spec, helper, "/work/capcat"); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "does not refuse set-id modes") {
				t.Errorf("a root-owned rw mount without seccomp: %v, want it refused", err)
			}
		} else {
			expect(t, "setxattr security.capability without seccomp", mustRun(t, spec, helper, "/work/capcat"), "setxattr-security.capability EPERM")
			spec.Env = []string{hostsideEnv + "=setcap"}
			expect(t, "setxattr security.capability from a nested user namespace", mustRun(t, spec, helper, "/work/capcat"), "userns EACCES")
		}
		capcat := filepath.Join(dir, "capcat")
		if _, err := unix.Getxattr(capcat, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("security.capability of the sandbox's file on the host: %v, want ENODATA", err)
		}
		checkHostFiles(t, dir, uid, gid, "capcat")
		if got := hostCaps(t, capcat); got != "0000000000000000" {
			t.Errorf("the sandbox's cat runs on the host with CapPrm %s, want none", got)
		}
		if !privileged() || uid == 0 {
			// Writing security.capability on the host needs root; in a
			// root-owned directory the sandbox's root is on-disk root,
			// so a capability it could write would count on the host:
			// the refusals above are what holds there.
			return
		}
		for _, tc := range []struct {
			rootid uint32
			want   string
		}{{uid, "0000000000000000"}, {0, "00000000000000c0"}} {
			v3 := binary.LittleEndian.AppendUint32(slices.Clone(capSetIDv2), tc.rootid)
			binary.LittleEndian.PutUint32(v3, vfsCapRevision3|vfsCapFlagsEffective)
			if err := unix.Setxattr(capcat, "security.capability", v3, 0); err != nil {
				t.Fatal(err)
			}
			if got := hostCaps(t, capcat); got != tc.want {
				t.Errorf("a v3 capability with rootid %d: cat runs on the host with CapPrm %s, want %s", tc.rootid, got, tc.want)
			}
		}
	})
}

// hostCaps runs the cat at path on the host, as uid and gid 65534 when
// this is root (whose own capabilities would hide the file's), and
// returns the CapPrm it ran with. The file is exec'd through an inherited
// fd, so the test's private temporary directories need not be reachable.
func hostCaps(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/proc/self/fd/3", "/proc/self/status")
	cmd.Args[0] = "cat" // busybox picks its applet by argv[0]
	cmd.ExtraFiles = []*os.File{f}
	if privileged() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running %s on the host: %v", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "CapPrm:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no CapPrm in %q", out)
	return ""
}
