package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// setIDScript plants set-uid and set-gid files in /work with the tools a
// script would use, printing each tool's exit status: a control that
// must work, then chmod (numeric and symbolic, on a file and a
// directory) and a copy of a set-uid file (mounted at /src) given its
// mode as cp -p would (made with cat, then chmod'ed by perl: GNU cp -p
// stops at the ownership it cannot keep, busybox has no --preserve=mode
// and its plain cp already fails creating the file with the set-uid
// mode), which all fail with EPERM; and install -m where the host has install (Debian
// does; the VM's busybox does not), GNU cp -p and tar -p.
func setIDScript() (script, out string, eperms int, files []string) {
	script = `cd /work && cp /bin/true t && chmod 755 t && echo control $?
chmod 6755 t; echo chmod-6755 $?
chmod u+s t; echo chmod-u+s $?
chmod g+s t; echo chmod-g+s $?
mkdir d && chmod g+s d; echo dir-g+s $?
cat /src/suid > p && perl -e 'chmod((stat shift)[2] & 07777, shift) or die "perl: $!\n"' /src/suid p; echo copy-mode $?`
	out = "control 0\nchmod-6755 1\nchmod-u+s 1\nchmod-g+s 1\ndir-g+s 1\ncopy-mode 1\n"
	eperms, files = 5, []string{"d", "p", "t"}
	if _, err := exec.LookPath("install"); err == nil {
		script += "\ninstall -m 4755 /bin/true i; echo install-4755 $?"
		out += "install-4755 1\n"
		eperms, files = eperms+1, append(files, "i")
	}
	// GNU cp -p and tar -p (busybox's differ) copy the file, then fail
	// to give it its set-uid mode.
	if gnu("cp") {
		script += "\ncp -p /src/suid cp-p; echo cp-p $?"
		out += "cp-p 1\n"
		eperms, files = eperms+1, append(files, "cp-p")
	}
	if gnu("tar") {
		script += "\ntar -C /src -cf /tmp/s.tar suid && tar -C /work -xpf /tmp/s.tar; echo tar-p $?"
		out += "tar-p 2\n"
		eperms, files = eperms+1, append(files, "suid")
	}
	slices.Sort(files)
	return script, out, eperms, files
}

// gnu reports whether the host's tool (which the sandbox sees in /usr)
// is GNU's.
func gnu(tool string) bool {
	out, err := exec.Command(tool, "--version").Output()
	return err == nil && strings.Contains(string(out), "GNU")
}

// setUIDSource returns a read-only mount flag of a directory holding a
// set-uid file, suid, for setIDScript to copy.
func setUIDSource(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(dir, "suid")
	if err := os.WriteFile(suid, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(suid); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("staging the set-uid source: %v %v", fi, err)
	}
	return dir + ":/src"
}

// cliOwners returns the directories the CLI's attacks go through, each
// with the owner its files must have on the host: an unprivileged
// caller's own; for root, a made-up non-root owner's (4321:4321, mapped
// onto the sandbox's user) and root's own (written as root).
func cliOwners(t *testing.T) map[string][3]uint32 {
	t.Helper()
	mk := func(uid, gid uint32) string {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(dir, int(uid), int(gid)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	if os.Geteuid() != 0 {
		uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
		return map[string][3]uint32{mk(uid, gid): {uid, gid}}
	}
	return map[string][3]uint32{mk(4321, 4321): {4321, 4321}, mk(0, 0): {0, 0}}
}

func cliOwnedDir(t *testing.T) (string, uint32, uint32) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return dir, uint32(os.Getuid()), uint32(os.Getgid())
	}
	if err := os.Chown(dir, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	return dir, 4321, 4321
}

// checkCLIHostFiles asserts that dir holds exactly want, each owned by
// uid:gid with neither S_ISUID nor S_ISGID.
func checkCLIHostFiles(t *testing.T, dir string, uid, gid uint32, want []string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			t.Errorf("%s has mode %#o on the host: a set-id bit", e.Name(), st.Mode)
		}
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d on the host, want %d:%d", e.Name(), st.Uid, st.Gid, uid, gid)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("host directory holds %q, want %q", names, want)
	}
}

// checkSetIDScript asserts setIDScript's result.
func checkSetIDScript(t *testing.T, r result) {
	t.Helper()
	_, out, eperms, _ := setIDScript()
	if r.code != 0 || r.stdout != out {
		t.Errorf("exit %d, stdout %q; want 0 and %q (stderr %q)", r.code, r.stdout, out, r.stderr)
	}
	if n := strings.Count(r.stderr, "Operation not permitted"); n != eperms {
		t.Errorf("stderr has %d EPERMs, want %d: %q", n, eperms, r.stderr)
	}
}

// TestCLIReadWriteMountDeniesSetID plants set-id files through
// `tent run --rw`: every attempt fails with EPERM and the host files have
// no set-id bit and the owner the sandbox was given (root's, for root's
// own directory).
func TestCLIReadWriteMountDeniesSetID(t *testing.T) {
	t.Parallel()
	script, _, _, files := setIDScript()
	for dir, o := range cliOwners(t) {
		checkSetIDScript(t, tent(t, "run", "--ro", setUIDSource(t), "--rw", dir+":/work", "--", "sh", "-c", script))
		checkCLIHostFiles(t, dir, o[0], o[1], files)
	}
}

// TestCLIMountDeniesSetID does the same through `tent mount` on a
// running sandbox.
func TestCLIMountDeniesSetID(t *testing.T) {
	t.Parallel()
	script, _, _, files := setIDScript()
	l := newLife(t)
	id := l.create(t, "--ro", setUIDSource(t))
	n := 0
	for dir, o := range cliOwners(t) {
		n++
		work := "/work" + strconv.Itoa(n)
		l.tent(t, "mount", id, "--rw", dir+":"+work).expect(t, 0)
		checkSetIDScript(t, l.tent(t, "exec", id, "--", "sh", "-c", strings.ReplaceAll(script, "/work", work)))
		checkCLIHostFiles(t, dir, o[0], o[1], files)
	}
}

// TestCLIRootReadWriteMountOfUsersDirectory is `sudo tent run --rw
// /home/alice/proj`: as root, with no --user, a directory owned by a
// non-root user is mounted for the sandbox's user, and what it writes
// there is that user's on the host.
func TestCLIRootReadWriteMountOfUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a root caller's identity model; an unprivileged caller's sandbox writes as the caller (TestCLIReadWriteMountDeniesSetID)")
	}
	t.Parallel()
	dir, uid, gid := cliOwnedDir(t)
	r := tent(t, "run", "--rw", dir+":/work", "--", "sh", "-c", "echo data > /work/f && mkdir /work/d && stat -c %u:%g /work/f")
	if r.code != 0 || r.stdout != "0:0\n" {
		t.Fatalf("exit %d, stdout %q (stderr %q); want 0 and the sandbox's own 0:0", r.code, r.stdout, r.stderr)
	}
	checkCLIHostFiles(t, dir, uid, gid, []string{"d", "f"})
}
