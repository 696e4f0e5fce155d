package fs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// testHostID stands in for the sandbox's host identity in these tests: not
// 65534, which is also the id that unmapped owners show as.
const testHostID = 4242

// overflowID is what an owner the idmapping does not map shows as.
const overflowID = 65534

// requireRoot skips t unless it runs as root: creating a user namespace
// with arbitrary maps, and idmapping a mount, need it.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("idmapped mounts are for root callers, and mapping other ids needs root (euid %d)", os.Geteuid())
	}
}

func TestIdmapOwner(t *testing.T) {
	const src = "/srv/data"
	for _, c := range []struct {
		access           Access
		uid, gid         uint32
		wantUID, wantGID uint32
		rootGroup        bool
	}{
		{ReadOnly, 0, 0, 0, 0, false},
		{CopyOnWrite, 0, 0, 0, 0, false},
		{ReadOnly, 1000, 0, 1000, 0, false},
		{ReadOnly, 1000, 1000, 1000, 1000, false},
		{ReadWrite, 1000, 1000, 1000, 1000, true},
		{ReadWrite, 1000, 0, 1000, 65534, true}, // a user's dir in group root: nogroup
		{ReadWrite, 0, 0, 0, 0, false},          // root's: written as root, as docker and bwrap do
		{ReadWrite, 0, 1000, 0, 1000, true},
	} {
		m := Mount{Source: src, Target: "/data", Access: c.access}
		uid, gid, rootGroup := idmapOwner(m, c.uid, c.gid)
		if uid != c.wantUID || gid != c.wantGID || rootGroup != c.rootGroup {
			t.Errorf("%s of %d:%d: %d:%d (root group mapped %v); want %d:%d (%v)", c.access, c.uid, c.gid, uid, gid, rootGroup, c.wantUID, c.wantGID, c.rootGroup)
		}
	}
}

// children lists this process's child pids.
func children(t *testing.T) string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil {
			out = append(out, strings.Fields(string(b))...)
		}
	}
	return strings.Join(out, " ")
}

// newIDMapUserNS creates a namespace with exactly the maps asked, and
// leaves no child behind.
func TestNewIDMapUserNS(t *testing.T) {
	requireRoot(t)
	before := children(t)
	fd, err := newIDMapUserNS(
		[]syscall.SysProcIDMap{{ContainerID: 1000, HostID: testHostID, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 1000, HostID: testHostID, Size: 1}, {ContainerID: 0, HostID: rootGroupStandIn, Size: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if after := children(t); after != before {
		t.Errorf("children %q after, %q before: the namespace's process was left", after, before)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd flags %#x, %v: want close-on-exec", flags, err)
	}
	uidMap, gidMap := readMaps(t, fd)
	if uidMap != "1000 4242 1" {
		t.Errorf("uid_map %q, want %q", uidMap, "1000 4242 1")
	}
	if gidMap != "1000 4242 1\n0 65533 1" {
		t.Errorf("gid_map %q, want %q", gidMap, "1000 4242 1\n0 65533 1")
	}
}

// readMaps reads the uid_map and gid_map of the user namespace fd
// names, from inside it: nsenter (given a duplicate as its fd 3) keeps
// its credentials, as this process's root is unmapped there.
func readMaps(t *testing.T, fd int) (string, string) {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("reading a namespace's maps needs nsenter (util-linux):", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "userns")
	defer f.Close()
	cmd := exec.Command(nsenter, "--user=/proc/self/fd/3", "--preserve-credentials",
		"sh", "-c", "cat /proc/self/uid_map; echo --; cat /proc/self/gid_map")
	cmd.Dir = t.TempDir()
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	u, g, _ := strings.Cut(string(out), "--\n")
	norm := func(s string) string {
		var lines []string
		for l := range strings.Lines(s) {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		return strings.Join(lines, "\n")
	}
	return norm(u), norm(g)
}

// ownedTree makes a directory owned by uid:gid holding one file per
// owner in files ("name" → uid, gid).
func ownedTree(t *testing.T, uid, gid int, files map[string][2]int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, owner := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, owner[0], owner[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ownerIn returns the owner that the detached mount fd shows for name
// ("." for its root) as "uid:gid".
func ownerIn(t *testing.T, fd int, name string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// openOne opens m with OpenMounts, skipping when this filesystem cannot
// idmap a rw mount.
func openOne(t *testing.T, m Mount, id IDMap) int {
	t.Helper()
	fds, err := OpenMounts([]Mount{m}, id)
	if err != nil && strings.Contains(err.Error(), "cannot idmap") {
		t.Skipf("%s cannot be idmapped here: %v", m.Source, err)
	}
	if err != nil || len(fds) != 1 {
		t.Fatalf("OpenMounts(%s %s) = %v, %v", m.Access, m.Source, fds, err)
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	return fds[0]
}

// A rw mount maps its directory's owner (group root: nogroup) onto the
// sandbox's host identity, on-disk group root onto rootGroupStandIn, and
// nothing else; it is nosuid, nodev and writable.
func TestOpenMountsReadWrite(t *testing.T) {
	requireRoot(t)
	dir := ownedTree(t, 1000, 0, map[string][2]int{
		"own":      {1000, overflowID}, // the owner, group nogroup
		"owngroup": {1000, 1000},       // another group
		"root":     {0, 0},
		"other":    {7, 7},
	})
	fd := openOne(t, Mount{Source: dir, Target: "/data", Access: ReadWrite}, IDMap{HostID: testHostID})
	checkMount(t, fd, false, map[string]string{
		".":        "4242:65533",
		"own":      "4242:4242",
		"owngroup": "4242:65534",
		"root":     "65534:65533",
		"other":    "65534:65534",
	})
}

// A ro mount maps its directory's owner, root included, read-only.
func TestOpenMountsReadOnly(t *testing.T) {
	requireRoot(t)
	dir := ownedTree(t, 0, 0, map[string][2]int{"root": {0, 0}, "other": {7, 7}})
	fd := openOne(t, Mount{Source: dir, Target: "/data", Access: ReadOnly}, IDMap{HostID: testHostID})
	checkMount(t, fd, true, map[string]string{".": "4242:4242", "root": "4242:4242", "other": "65534:65534"})
}

// A root-owned directory's rw mount maps root onto the sandbox's host
// identity: root's files are the sandbox's, what it creates is root's on
// disk, other owners stay unmapped. It needs SetIDRefused.
func TestOpenMountsReadWriteRootOwned(t *testing.T) {
	requireRoot(t)
	dir := ownedTree(t, 0, 0, map[string][2]int{"root": {0, 0}, "other": {7, 7}})
	m := Mount{Source: dir, Target: "/data", Access: ReadWrite}
	// Only where the sandbox cannot make set-id files.
	fds, err := OpenMounts([]Mount{m}, IDMap{HostID: testHostID})
	var ue *UnsupportedMountError
	if !errors.As(err, &ue) || fds != nil || !strings.Contains(ue.Reason, "does not refuse set-id modes") {
		t.Fatalf("without SetIDRefused: %v, %v; want an *UnsupportedMountError and no fds", fds, err)
	}
	fd := openOne(t, m, IDMap{HostID: testHostID, SetIDRefused: true})
	checkMount(t, fd, false, map[string]string{".": "4242:4242", "root": "4242:4242", "other": "65534:65534"})
}

// checkMount asserts the owners entries show through the detached mount
// fd, and its flags: nosuid, nodev, and read-only when ro.
func checkMount(t *testing.T, fd int, ro bool, owners map[string]string) {
	t.Helper()
	for name, want := range owners {
		if got := ownerIn(t, fd, name); got != want {
			t.Errorf("%s shows as %s, want %s", name, got, want)
		}
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		t.Fatal(err)
	}
	want := uint64(unix.ST_NOSUID | unix.ST_NODEV)
	if ro {
		want |= unix.ST_RDONLY
	}
	if flags := uint64(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_RDONLY); flags != want {
		t.Errorf("mount flags %#x, want %#x (nosuid, nodev, read-only %v)", flags, want, ro)
	}
}

// What OpenMounts refuses, it refuses whole: no descriptor is returned.
func TestOpenMountsRefusals(t *testing.T) {
	requireRoot(t)
	ok := ownedTree(t, 1000, 1000, nil)
	var fds []int
	var err error
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	fds, err = OpenMounts([]Mount{{Source: ok, Target: "/a", Access: ReadOnly}, {Source: link, Target: "/b", Access: ReadOnly}}, IDMap{HostID: testHostID})
	if !errors.Is(err, ErrInvalidMount) || !errors.Is(err, unix.ELOOP) || fds != nil || !strings.HasPrefix(err.Error(), "mount "+link+": source "+link+" goes through a symlink") {
		t.Errorf("a symlinked source: %v, %v; want ErrInvalidMount wrapping ELOOP and no fds", fds, err)
	}
	missing := filepath.Join(ok, "missing")
	_, err = OpenMounts([]Mount{{Source: missing, Target: "/a", Access: ReadOnly}}, IDMap{HostID: testHostID})
	if !errors.Is(err, ErrInvalidMount) || !errors.Is(err, unix.ENOENT) || err.Error() != "mount "+missing+": open "+missing+": no such file or directory" {
		t.Errorf("a missing source: %v; want ErrInvalidMount wrapping ENOENT", err)
	}
}

// The sandbox's own user namespace idmaps a mount owned by exactly its
// ids when its maps are those a new namespace would have; otherwise a
// new namespace is made.
func TestIDMapReusesTheInitsNamespace(t *testing.T) {
	requireRoot(t)
	sleep := exec.Command("sleep", "30")
	sleep.Dir = t.TempDir()
	sleep.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testHostID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testHostID, Size: 1}},
	}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	var initNS unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/user", sleep.Process.Pid), &initNS); err != nil {
		t.Fatal(err)
	}
	inode := func(fd int) uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	n := idmapNamespaces{hostID: testHostID, initPID: sleep.Process.Pid, inside: idmapKey{uid: 0, gid: 0}}
	defer n.close()
	fd, err := n.get(0, 0, false)
	if err != nil || inode(fd) != initNS.Ino {
		t.Errorf("get(0, 0) = %d, %v: want the init's namespace (inode %d)", fd, err, initNS.Ino)
	}
	if again, _ := n.get(0, 0, false); again != fd {
		t.Errorf("a second get(0, 0) = %d, want the same fd %d", again, fd)
	}
	if fd, err := n.get(1000, 1000, true); err != nil || inode(fd) == initNS.Ino {
		t.Errorf("get(1000, 1000, rootGroup) = %d, %v: want a new namespace", fd, err)
	}
	other := idmapNamespaces{hostID: testHostID + 1, initPID: sleep.Process.Pid, inside: idmapKey{uid: 0, gid: 0}}
	defer other.close()
	if fd, err := other.get(0, 0, false); err != nil || inode(fd) == initNS.Ino {
		t.Errorf("with another host id: get(0, 0) = %d, %v: want a new namespace", fd, err)
	}
	n.close()
	if len(n.fds) != 0 {
		t.Errorf("close left %v", n.fds)
	}
}
