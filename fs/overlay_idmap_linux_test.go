package fs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The container's id range in these tests: ids 0..65535 map onto host
// ids 100000..165535.
const testRangeBase = 100000

func TestParseOverlayOptions(t *testing.T) {
	for _, c := range []struct {
		name, opts string
		want       overlayOptions
		err        string
	}{
		{
			name: "containerd's",
			opts: `rw,lowerdir=/s/2/fs:/s/1/fs,upperdir=/s/3/fs,workdir=/s/3/work,index=off,uuid=on`,
			want: overlayOptions{lower: []string{"/s/2/fs", "/s/1/fs"}, upper: "/s/3/fs", work: "/s/3/work",
				other: []overlayOption{{key: "index", value: "off"}, {key: "uuid", value: "on"}}},
		},
		{
			// mountinfo's octal escapes (space, backslash, comma), then
			// overlayfs's own (\: and \, in a layer).
			name: "escapes",
			opts: `rw,lowerdir=/l\040a:/l\134:b:/l\134\054c,upperdir=/u\134\134x,workdir=/w,userxattr,volatile`,
			want: overlayOptions{lower: []string{"/l a", "/l:b", "/l,c"}, upper: `/u\x`, work: "/w",
				other: []overlayOption{{key: "userxattr", flag: true}, {key: "volatile", flag: true}}},
		},
		{
			name: "lower only, data-only layers",
			opts: `ro,lowerdir=/a:/b::/c:/d,redirect_dir=on,metacopy=on`,
			want: overlayOptions{lower: []string{"/a", "/b"}, data: []string{"/c", "/d"},
				other: []overlayOption{{key: "ro", flag: true}, {key: "redirect_dir", value: "on"}, {key: "metacopy", value: "on"}}},
		},
		{
			// Linux 6.8's forms show each path as it was given.
			name: "lowerdir+ and datadir+",
			opts: `rw,lowerdir+=/a\134:b,lowerdir+=/c,datadir+=/d,upperdir=/u,workdir=/w,xino=on`,
			want: overlayOptions{lower: []string{`/a\:b`, "/c"}, data: []string{"/d"}, upper: "/u", work: "/w",
				other: []overlayOption{{key: "xino", value: "on"}}},
		},
		{name: "relative", opts: `rw,lowerdir=1/fs:/s/2/fs,upperdir=/u,workdir=/w`, err: `layer "1/fs" is a relative path`},
		{name: "no lower", opts: `rw,upperdir=/u,workdir=/w`, err: "no lower layer"},
		{name: "upper without work", opts: `rw,lowerdir=/a,upperdir=/u`, err: "upperdir without workdir"},
		{name: "empty layer", opts: `rw,lowerdir=/a:`, err: "an empty layer"},
		{name: "mixed", opts: `rw,lowerdir=/a,lowerdir+=/b`, err: "lowerdir+ mixed with lowerdir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseOverlayOptions(c.opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// testOverlay is an overlay mounted in a temporary directory, as
// containerd's snapshotter mounts an image's rootfs.
type testOverlay struct {
	base, lower, upper, work, merged string
}

// mountTestOverlay makes a lower layer holding files owned by 0:0 and
// 101:101 and a directory owned by 101, empty upper and work directories
// owned by root, and mounts the overlay of them; it is unmounted when t
// ends.
func mountTestOverlay(t *testing.T) testOverlay {
	t.Helper()
	base := t.TempDir()
	o := testOverlay{base: base, lower: filepath.Join(base, "lower"), upper: filepath.Join(base, "upper"),
		work: filepath.Join(base, "work"), merged: filepath.Join(base, "merged")}
	for _, d := range []string{o.lower, o.upper, o.work, o.merged, filepath.Join(o.lower, "dir101")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, id := range map[string]int{"root": 0, "file101": 101} {
		if err := os.WriteFile(filepath.Join(o.lower, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(o.lower, name), id, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(o.lower, "dir101"), 101, 101); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noMountsBeneath(t, base) })
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off", o.lower, o.upper, o.work)
	if err := unix.Mount("overlay", o.merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount an overlay here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(o.merged, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the overlay: %v", err)
		}
	})
	return o
}

// noMountsBeneath fails t if this process's mount table has a mount
// beneath dir.
func noMountsBeneath(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(unescapeOctal(f[4]), dir) {
			t.Errorf("a mount is left: %s", l)
		}
	}
}

// rangeUserNS returns an fd of a user namespace mapping ids 0..65535
// onto testRangeBase.., held by a process killed when t ends.
func rangeUserNS(t *testing.T) int {
	t.Helper()
	holder := exec.Command("sleep", "300")
	holder.Dir = "/"
	holder.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testRangeBase, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testRangeBase, Size: 65536}},
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", holder.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// attachAt moves the detached mount fd onto a new directory beneath
// base, unmounted when t ends, and returns its path.
func attachAt(t *testing.T, fd int, base string) string {
	t.Helper()
	at := filepath.Join(base, "attached")
	if err := os.Mkdir(at, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		t.Fatal(os.NewSyscallError("move_mount", err))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(at, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the idmapped overlay: %v", err)
		}
	})
	return at
}

// statOwner returns path's owner as "uid:gid", without following a
// symlink.
func statOwner(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// createAs creates name in the directory dir with fsuid and fsgid id, on
// a thread discarded after, and returns the error.
func createAs(t *testing.T, dir string, id int, name string) error {
	t.Helper()
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's fs ids are changed
		_ = unix.Setfsgid(id)
		_ = unix.Setfsuid(id)
		fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		ch <- err
	}()
	return <-ch
}

// The idmapped overlay shows disk id k as host id testRangeBase+k, its
// root as the container's root, and writes land in the upper layer with
// host ids; nothing is left open or mounted.
func TestOpenIDMappedOverlay(t *testing.T) {
	requireRoot(t)
	for _, joined := range []bool{false, true} {
		t.Run(fmt.Sprintf("joined=%v", joined), func(t *testing.T) {
			o := mountTestOverlay(t)
			userns := rangeUserNS(t)
			before := openFDs(t)
			fd, err := openIDMappedOverlay(o.merged, userns, testRangeBase, testRangeBase, joined)
			if err != nil {
				t.Fatal(err)
			}
			if after := openFDs(t); after != before+1 {
				t.Errorf("%d descriptors open after, %d before: want only the returned one more", after, before)
			}
			checkMount(t, fd, false, map[string]string{})
			at := attachAt(t, fd, o.base)
			unix.Close(fd)
			for name, want := range map[string]string{"": "100000:100000", "root": "100000:100000", "file101": "100101:100101", "dir101": "100101:100101"} {
				if got := statOwner(t, filepath.Join(at, name)); got != want {
					t.Errorf("/%s shows as %s, want %s", name, got, want)
				}
			}
			if got := statOwner(t, o.upper); got != "100000:100000" {
				t.Errorf("the upper directory is %s on disk, want 100000:100000 (the container's root)", got)
			}
			// A copy-up keeps the owner the idmapped lower shows.
			if err := os.WriteFile(filepath.Join(at, "file101"), []byte("changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := statOwner(t, filepath.Join(o.upper, "file101")); got != "100101:100101" {
				t.Errorf("the copied-up file101 is %s on disk, want 100101:100101", got)
			}
			// The container's root may create in "/", and its file is its
			// host ids on disk.
			if err := createAs(t, at, testRangeBase, "new"); err != nil {
				t.Fatalf("creating /new as host id %d: %v", testRangeBase, err)
			}
			if got := statOwner(t, filepath.Join(o.upper, "new")); got != "100000:100000" {
				t.Errorf("/new is %s on disk, want 100000:100000", got)
			}
			// Another id of the range may not.
			if err := createAs(t, at, testRangeBase+101, "new101"); !errors.Is(err, unix.EACCES) {
				t.Errorf("creating /new101 as host id %d: %v, want EACCES", testRangeBase+101, err)
			}
		})
	}
}

// A lower-only overlay (no upper directory to chown) is rebuilt
// read-only; dir may be relative.
func TestOpenIDMappedOverlayLowerOnly(t *testing.T) {
	requireRoot(t)
	o := mountTestOverlay(t)
	second := filepath.Join(o.base, "second")
	if err := os.Mkdir(second, 0o755); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(o.base, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", ro, "overlay", 0, "lowerdir="+second+":"+o.lower); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(ro, unix.MNT_DETACH)
	userns := rangeUserNS(t)
	// Given relative to the working directory.
	t.Chdir(o.base)
	fd, err := OpenIDMappedOverlay("ro", userns, testRangeBase, testRangeBase)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	checkMount(t, fd, true, map[string]string{".": "100000:100000", "file101": "100101:100101"})
}

// What is not the root of an overlay, or goes through a symlink, is
// refused, and leaves nothing open.
func TestOpenIDMappedOverlayRefusals(t *testing.T) {
	requireRoot(t)
	o := mountTestOverlay(t)
	userns := rangeUserNS(t)
	before := openFDs(t)
	link := filepath.Join(o.base, "link")
	if err := os.Symlink(o.merged, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
		is        error
	}{
		{o.lower, "idmapped overlay of " + o.lower + ": not an overlay mount (filesystem magic", nil},
		{filepath.Join(o.merged, "dir101"), "not the root of its overlay mount", nil},
		{link, "goes through a symlink", unix.ELOOP},
	} {
		fd, err := OpenIDMappedOverlay(c.dir, userns, testRangeBase, testRangeBase)
		if err == nil {
			unix.Close(fd)
			t.Errorf("%s: no error", c.dir)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: %v, want an error saying %q", c.dir, err, c.want)
		}
	}
	// A lower layer's path replaced by a symlink after the mount (the
	// overlay keeps the directory; mountinfo shows the path).
	moved := o.lower + ".moved"
	if err := os.Rename(o.lower, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, o.lower); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenIDMappedOverlay(o.merged, userns, testRangeBase, testRangeBase)
	if err == nil {
		unix.Close(fd)
	}
	var se *SourceSymlinkError
	if !errors.As(err, &se) || se.Source != o.lower {
		t.Errorf("a lower layer replaced by a symlink: %v, want a *SourceSymlinkError for %s", err, o.lower)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after the refusals, %d before", after, before)
	}
}

// A layer on a filesystem that cannot be idmapped (ramfs) is refused
// with ErrNoIDMappedLayers, naming the feature.
func TestOpenIDMappedOverlayLayerNotIdmappable(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	ram := filepath.Join(base, "ram")
	if err := os.Mkdir(ram, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("ramfs", ram, "ramfs", 0, ""); err != nil {
		t.Skipf("no ramfs here: %v", err)
	}
	defer unix.Unmount(ram, unix.MNT_DETACH)
	merged := filepath.Join(base, "merged")
	for _, d := range []string{filepath.Join(ram, "a"), filepath.Join(ram, "b"), merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+filepath.Join(ram, "a")+":"+filepath.Join(ram, "b")); err != nil {
		t.Skipf("cannot mount an overlay of ramfs here: %v", err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	userns := rangeUserNS(t)
	before := openFDs(t)
	fd, err := OpenIDMappedOverlay(merged, userns, testRangeBase, testRangeBase)
	if err == nil {
		unix.Close(fd)
	}
	if !errors.Is(err, ErrNoIDMappedLayers) || !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "idmapped overlay layers (Linux 5.19)") {
		t.Errorf("a ramfs layer: %v, want ErrNoIDMappedLayers wrapping EINVAL", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
}

// The overlay's options are kept: with index=on (off by default),
// overlayfs refuses an upper directory another overlay uses.
func TestOpenIDMappedOverlayKeepsOptions(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	lower, upper, work, merged := filepath.Join(base, "l"), filepath.Join(base, "u"), filepath.Join(base, "w"), filepath.Join(base, "m")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work+",index=on"); err != nil {
		t.Skipf("no overlay with index=on here: %v", err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	userns := rangeUserNS(t)
	before := openFDs(t)
	fd, err := OpenIDMappedOverlay(merged, userns, testRangeBase, testRangeBase)
	if err == nil {
		unix.Close(fd)
	}
	if !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "creating the overlay: fsconfig: device or resource busy") {
		t.Fatalf("an index=on overlay whose upper is in use: %v, want EBUSY", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
}

// fsLog reads the filesystem context's log (Linux 6.5+ for overlayfs).
func TestFsLog(t *testing.T) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Skip("no overlayfs here:", err)
	}
	defer unix.Close(fsfd)
	err = unix.FsconfigSetString(fsfd, "index", "bogus")
	if err == nil {
		t.Skip("overlayfs has a legacy context here (before Linux 6.5): it checks options at creation and logs to dmesg")
	}
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("index=bogus: %v, want EINVAL", err)
	}
	got := fsLog(fsfd)
	if !strings.HasPrefix(got, " (kernel: e overlay: ") || !strings.Contains(got, "index") {
		t.Errorf("fsLog = %q, want the kernel's message about index", got)
	}
	if again := fsLog(fsfd); again != "" {
		t.Errorf("a second fsLog = %q, want nothing left", again)
	}
}

// onPrivateThread runs f on a thread other than the main one (whose
// mount namespace /proc/self shows, and which the runtime never ends), in
// a mount namespace of its own, in /proc/self/fd; the process's mount
// namespace is unchanged after.
func TestOnPrivateThread(t *testing.T) {
	requireRoot(t)
	mntNS := func(path string) string {
		l, err := os.Readlink(path)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	process := mntNS("/proc/self/ns/mnt")
	for i := range 200 {
		var tid int
		var ns, wd string
		_, err := onPrivateThread(func() (int, error) {
			tid = unix.Gettid()
			ns = mntNS("/proc/thread-self/ns/mnt")
			var err error
			wd, err = os.Getwd()
			return -1, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if tid == os.Getpid() || ns == process || wd != fmt.Sprintf("/proc/%d/fd", os.Getpid()) {
			t.Fatalf("call %d: f ran on thread %d (process %d), in mount namespace %s (the process's %s), in %s", i, tid, os.Getpid(), ns, process, wd)
		}
		if now := mntNS("/proc/self/ns/mnt"); now != process {
			t.Fatalf("call %d: the process's mount namespace is %s after, %s before", i, now, process)
		}
	}
}

// An overlay whose image layer is owned by the range's root already (a
// snapshot chowned when it was unpacked) is not idmapped a second time:
// ErrLayersInRange, and nothing left open. The upper layer's content,
// which a container writes, does not count: only the bottom layer.
func TestOpenIDMappedOverlayLayersInRange(t *testing.T) {
	requireRoot(t)
	o := mountTestOverlay(t)
	userns := rangeUserNS(t)
	// A copy-up's own owner in the upper layer is the range's: not
	// taken for a shifted snapshot.
	if err := os.Mkdir(filepath.Join(o.upper, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(o.upper, "etc"), testRangeBase, testRangeBase); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenIDMappedOverlay(o.merged, userns, testRangeBase, testRangeBase)
	if err != nil {
		t.Fatalf("an upper layer with the range's files: %v", err)
	}
	unix.Close(fd)
	if err := os.Chown(o.lower, testRangeBase, testRangeBase); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	fd, err = OpenIDMappedOverlay(o.merged, userns, testRangeBase, testRangeBase)
	if err == nil {
		unix.Close(fd)
	}
	if !errors.Is(err, ErrLayersInRange) {
		t.Errorf("a layer owned by the range's root: %v, want ErrLayersInRange", err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
}
