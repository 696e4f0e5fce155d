//go:build linux

package sandbox_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// The attacks of this file are made by this test binary itself, exec'd
// inside the sandbox with hostsideEnv set: init runs before TestMain (and
// before sandbox.Init, which a command never needs), makes the exact
// syscalls and prints one "NAME RESULT" line each, RESULT being "ok" or
// the errno's name. The binary's directory is mounted read-only at
// hostsideDir.
const (
	hostsideEnv = "TENT_HOSTSIDE_HELPER"
	hostsideDir = "/opt/hostside"
)

// security.capability's magic_etc (linux/capability.h).
const (
	vfsCapRevision2      = 0x02000000
	vfsCapRevision3      = 0x03000000
	vfsCapFlagsEffective = 0x000001
)

func init() {
	if op := os.Getenv(hostsideEnv); op != "" {
		os.Exit(hostsideHelper(op, os.Args[1:]))
	}
}

// capSetIDv2 is a version 2 security.capability value: CAP_SETGID and
// CAP_SETUID permitted and effective, as `setcap cap_setuid,cap_setgid+ep`
// writes it.
var capSetIDv2 = func() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], vfsCapRevision2|vfsCapFlagsEffective)
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_SETGID|1<<unix.CAP_SETUID)
	return b
}()

// setIDAttempts are the helper's "setid DIR" operations with the result
// each must have under the default profile. The controls (ok) show that
// the directory is writable and modes without set-id bits still work, so
// an EPERM is the filter's and nothing else's.
var setIDAttempts = []struct{ name, want string }{
	{"control-open-creat-0755", "ok"},
	{"control-chmod-0750", "ok"},
	{"chmod-06755", "EPERM"},
	{"chmod-04755", "EPERM"},
	{"chmod-02755", "EPERM"},
	{"fchmod-04755", "EPERM"},
	{"fchmodat-02755", "EPERM"},
	{"fchmodat2-04755", "EPERM"},
	{"open-creat-04755", "EPERM"},
	{"openat-creat-02755", "EPERM"},
	{"creat-06755", "EPERM"},
	{"openat-tmpfile-04755", "EPERM"},
	{"mknodat-reg-04755", "EPERM"},
	{"mknod-fifo-02644", "EPERM"},
	{"openat2-creat-04755", "ENOSYS"},
	{"mkdir-02755", "ok"},
	{"setxattr-security.capability", "EPERM"},
	{"os.Root-create", "ok"},
}

// hostsideHelper runs inside a sandbox.
func hostsideHelper(op string, args []string) int {
	result := func(name string, err error) {
		var errno syscall.Errno
		switch {
		case err == nil:
			fmt.Println(name, "ok")
		case errors.As(err, &errno):
			fmt.Println(name, unix.ErrnoName(errno))
		default:
			fmt.Println(name, err)
		}
	}
	errno := func(e syscall.Errno) error {
		if e == 0 {
			return nil
		}
		return e
	}
	switch op {
	case "setid": // setid DIR
		dir := args[0]
		p := func(name string) *byte { b, _ := unix.BytePtrFromString(filepath.Join(dir, name)); return b }
		ptr := func(b *byte) uintptr { return uintptr(unsafe.Pointer(b)) }
		atFDCWD := uintptr(0xffffffffffffff9c) // AT_FDCWD, -100
		ctl, victim := filepath.Join(dir, "ctl"), filepath.Join(dir, "victim")
		for _, a := range setIDAttempts {
			var err error
			switch a.name {
			case "control-open-creat-0755":
				var fd int
				if fd, err = unix.Open(ctl, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o755); err == nil {
					unix.Close(fd)
				}
				if err == nil {
					err = os.WriteFile(victim, []byte("#!/bin/sh\nid\n"), 0o755)
				}
			case "control-chmod-0750":
				err = unix.Chmod(ctl, 0o750)
			case "chmod-06755":
				err = unix.Chmod(victim, 0o6755)
			case "chmod-04755":
				err = unix.Chmod(victim, 0o4755)
			case "chmod-02755":
				err = unix.Chmod(victim, 0o2755)
			case "fchmod-04755":
				var fd int
				if fd, err = unix.Open(victim, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
					err = unix.Fchmod(fd, 0o4755)
					unix.Close(fd)
				}
			case "fchmodat-02755":
				_, _, e := unix.Syscall(unix.SYS_FCHMODAT, atFDCWD, ptr(p("victim")), 0o2755)
				err = errno(e)
			case "fchmodat2-04755":
				_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, atFDCWD, ptr(p("victim")), 0o4755, 0, 0, 0)
				err = errno(e)
			case "open-creat-04755":
				r, _, e := unix.Syscall(unix.SYS_OPEN, ptr(p("o1")), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o4755)
				if err = errno(e); err == nil {
					unix.Close(int(r))
				}
			case "openat-creat-02755":
				r, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(p("o2")), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o2755, 0, 0)
				if err = errno(e); err == nil {
					unix.Close(int(r))
				}
			case "creat-06755":
				r, _, e := unix.Syscall(unix.SYS_CREAT, ptr(p("o3")), 0o6755, 0)
				if err = errno(e); err == nil {
					unix.Close(int(r))
				}
			case "openat-tmpfile-04755":
				d, _ := unix.BytePtrFromString(dir)
				r, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(d), unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o4755, 0, 0)
				if err = errno(e); err == nil {
					unix.Close(int(r))
				}
			case "mknodat-reg-04755":
				_, _, e := unix.Syscall6(unix.SYS_MKNODAT, atFDCWD, ptr(p("m1")), unix.S_IFREG|0o4755, 0, 0, 0)
				err = errno(e)
			case "mknod-fifo-02644":
				_, _, e := unix.Syscall(unix.SYS_MKNOD, ptr(p("m2")), unix.S_IFIFO|0o2644, 0)
				err = errno(e)
			case "openat2-creat-04755":
				how := unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC, Mode: 0o4755}
				r, _, e := unix.Syscall6(unix.SYS_OPENAT2, atFDCWD, ptr(p("o4")), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
				if err = errno(e); err == nil {
					unix.Close(int(r))
				}
			case "mkdir-02755":
				err = unix.Mkdir(filepath.Join(dir, "dir"), 0o2755)
			case "setxattr-security.capability":
				err = unix.Setxattr(victim, "security.capability", capSetIDv2, 0)
			case "os.Root-create":
				var root *os.Root
				if root, err = os.OpenRoot(dir); err == nil {
					err = root.WriteFile("viaroot", []byte("written through os.Root\n"), 0o644)
					root.Close()
				}
			default:
				err = fmt.Errorf("unknown attempt %q", a.name)
			}
			result(a.name, err)
		}
	case "setcap": // setcap FILE: write security.capability from a nested user namespace
		cmd := exec.Command("/proc/self/exe", args[0])
		cmd.Env = []string{hostsideEnv + "=setcap-inner"}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			result("userns", err)
			return 0
		}
		fmt.Print(string(out))
	case "setcap-inner":
		result("setxattr-security.capability", unix.Setxattr(args[0], "security.capability", capSetIDv2, 0))
	default:
		fmt.Fprintln(os.Stderr, "unknown helper operation", op)
		return 2
	}
	return 0
}

// withHostsideHelper returns spec with this test binary's directory
// mounted read-only at hostsideDir, and the helper's path inside.
func withHostsideHelper(t *testing.T, spec sandbox.Spec) (sandbox.Spec, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: filepath.Dir(exe), Target: hostsideDir, Access: sandbox.ReadOnly})
	return spec, hostsideDir + "/" + filepath.Base(exe)
}

// helperResults parses the helper's "NAME RESULT" lines.
func helperResults(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, res, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("helper printed %q", sc.Text())
		}
		got[name] = res
	}
	return got
}

// hostsideOwner returns a directory for a writable mount and the ids
// files the sandbox creates in it must have on the host. A root caller's
// directory belongs to uid:gid 4321:4321, a made-up non-root owner that
// tent maps onto the sandbox's user; an unprivileged caller's is its own.
func hostsideOwner(t *testing.T) (dir string, uid, gid uint32) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !privileged() {
		return dir, uint32(os.Getuid()), uint32(os.Getgid())
	}
	if err := os.Chown(dir, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	skipWithoutIdmap(t, dir, sandbox.ReadWrite)
	return dir, 4321, 4321
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
	dir, uid, gid := hostsideOwner(t)
	spec, helper := withHostsideHelper(t, sandbox.Spec{
		Mounts: []sandbox.Mount{{Source: dir, Target: "/work", Access: sandbox.ReadWrite}},
		Env:    []string{hostsideEnv + "=setid"},
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
// attached at runtime (what `tent mount` does); as root, attaching a
// root-owned directory rw is refused like a start-time mount.
func TestAttachedMountDeniesSetID(t *testing.T) {
	spec, helper := withHostsideHelper(t, sandbox.Spec{})
	sb := provision(t, spec)
	if privileged() {
		root := t.TempDir()
		err := sb.Mount(context.Background(), sandbox.Mount{Source: root, Target: "/rootowned", Access: sandbox.ReadWrite})
		checkRootOwnedRefusal(t, err, root)
	}
	dir, uid, gid := hostsideOwner(t)
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: dir, Target: "/work", Access: sandbox.ReadWrite}); err != nil {
		t.Fatal(err)
	}
	out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{helper, "/work"}, Env: []string{hostsideEnv + "=setid"}})
	if res.ExitCode != 0 {
		t.Fatalf("helper exited %d: %q", res.ExitCode, out)
	}
	checkSetIDAttempts(t, out)
	checkHostFiles(t, dir, uid, gid, setIDFiles...)
}

// checkRootOwnedRefusal asserts the refusal of a root caller's rw mount
// of the root-owned directory dir.
func checkRootOwnedRefusal(t *testing.T, err error, dir string) {
	t.Helper()
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || len(ue.Missing) != 1 {
		t.Fatalf("rw mount of root-owned %s: got %v, want an UnsupportedError", dir, err)
	}
	m := ue.Missing[0]
	if m.Protection != "rw mount "+dir || !containsAll(m.Reason, "owned by root") || !containsAll(m.Fix, "chown", "--cow", "run tent as that user") {
		t.Errorf("refusal %+v: want the protection, the reason (owned by root) and the fixes (chown, --cow, run as the user)", m)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("root-owned %s after the refusal: %v %v", dir, ents, err)
	}
}

// TestRootReadWriteMountMapsOwner checks a root caller's rw mount of a
// directory owned by someone else: what the sandbox creates is that
// owner's on the host, inside it is the sandbox user's whatever
// Spec.User says, group root becomes nogroup, other ids cannot be
// chowned to, and a root-owned directory is refused.
func TestRootReadWriteMountMapsOwner(t *testing.T) {
	if !privileged() {
		t.Skip("a root caller's identity model: an unprivileged caller's sandbox writes as the caller, which TestSetIDFromInsideIsDenied checks")
	}
	root := t.TempDir()
	_, _, err := run(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: root, Target: "/out", Access: sandbox.ReadWrite}}}, "true")
	checkRootOwnedRefusal(t, err, root)

	for _, tc := range []struct {
		name             string
		user             *sandbox.User
		dirGID, fileGID  uint32
		insideU, insideG string
	}{
		{"default user", nil, 4321, 4321, "0", "0"},
		{"--user 1234:5678", &sandbox.User{UID: 1234, GID: 5678}, 4321, 4321, "1234", "5678"},
		{"group root", nil, 0, 65534, "0", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chown(dir, 4321, int(tc.dirGID)); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, 0o755)
			skipWithoutIdmap(t, dir, sandbox.ReadWrite)
			spec := sandbox.Spec{User: tc.user, Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}
			out := mustRun(t, spec, "sh", "-c", `echo data > /out/f && mkdir /out/d && ln -s f /out/l && stat -c '%u:%g' /out /out/f;
				chown 4321 /out/f 2>/dev/null; echo chown-4321 $?; chown 0:0 /out/f 2>/dev/null; echo chown-0 $?`)
			want := tc.insideU + ":" + tc.insideG
			var chownRoot string
			if tc.user == nil {
				chownRoot = "0" // already the sandbox user's 0:0 inside: a no-op
			} else {
				chownRoot = "1" // 0 is not mapped in the sandbox
			}
			if tc.dirGID == 0 {
				// The directory's group (on-disk 0) is unmapped inside.
				want = tc.insideU + ":65534\n" + tc.insideU + ":" + tc.insideG
			} else {
				want = want + "\n" + want
			}
			if exp := want + "\nchown-4321 1\nchown-0 " + chownRoot; out != exp {
				t.Errorf("inside: %q, want %q", out, exp)
			}
			checkHostFiles(t, dir, 4321, tc.fileGID, "f", "d", "l")
		})
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
// As root it then shows why such a capability would be inert anyway
// once the sandbox's root never maps to host uid 0: the kernel would
// store it as a v3 capability whose rootid is the sandbox's root as seen
// through the mount, the directory's owner; a v3 capability counts only
// in a user namespace whose root is its rootid, so cat gains nothing on
// the host. With rootid 0, what the earlier idmapping (on-disk 0 ↔ the
// sandbox's root) would have stored, it does gain them.
func TestFileCapabilityFromInside(t *testing.T) {
	dir, uid, gid := hostsideOwner(t)
	spec, helper := withHostsideHelper(t, sandbox.Spec{
		Mounts: []sandbox.Mount{{Source: dir, Target: "/work", Access: sandbox.ReadWrite}},
	})
	mustRun(t, spec, "cp", "/bin/cat", "/work/capcat")
	spec.Env = []string{hostsideEnv + "=setcap-inner"}
	expect(t, "setxattr security.capability under the default profile", mustRun(t, spec, helper, "/work/capcat"), "setxattr-security.capability EPERM")
	spec.Seccomp.Unconfined = true
	expect(t, "setxattr security.capability without seccomp", mustRun(t, spec, helper, "/work/capcat"), "setxattr-security.capability EPERM")
	spec.Env = []string{hostsideEnv + "=setcap"}
	expect(t, "setxattr security.capability from a nested user namespace", mustRun(t, spec, helper, "/work/capcat"), "userns EACCES")
	capcat := filepath.Join(dir, "capcat")
	if _, err := unix.Getxattr(capcat, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("security.capability of the sandbox's file on the host: %v, want ENODATA", err)
	}
	checkHostFiles(t, dir, uid, gid, "capcat")
	if got := hostCaps(t, capcat); got != "0000000000000000" {
		t.Errorf("the sandbox's cat runs on the host with CapPrm %s, want none", got)
	}
	if !privileged() {
		return // writing security.capability on the host needs root
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
