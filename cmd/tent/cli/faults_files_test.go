package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/files"
	fslayer "github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
	transferpkg "github.com/tent-sandbox/tent/sandbox/transfer"
)

// Faults while tent replaces a file the user had (issue 36): a full disk
// leaves the old file, whole, with its mode; a kill leaves a temporary
// that the next operation of the same kind removes, and never one that
// is being written.

// writeOld writes the file a user had: content, mode 0644 (whatever the
// umask).
func writeOld(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkUntouched fails unless dir holds exactly names and the file p
// still has content and mode 0644.
func checkUntouched(t *testing.T, what, p, content string, names ...string) {
	t.Helper()
	b, err := os.ReadFile(p)
	fi, serr := os.Stat(p)
	if err != nil || serr != nil || string(b) != content || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: %s holds %d bytes (%v), mode %v (%v); want the old %d bytes, mode 0644", what, p, len(b), err, fi.Mode().Perm(), serr, len(content))
	}
	slices.Sort(names)
	if got := atomicfiletest.Names(t, filepath.Dir(p)); !slices.Equal(got, names) {
		t.Errorf("%s: %s holds %q, want %q (no temporary left)", what, filepath.Dir(p), got, names)
	}
}

// holdTemp creates, in dir, a temporary of o's pattern that this process
// holds locked: a writer still at work, which no cleanup may remove.
func holdTemp(t *testing.T, dir string, o atomicfile.Options) string {
	t.Helper()
	f, err := atomicfile.Create(filepath.Join(dir, "live-target"), 0o600, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Abort)
	return f.TempName()
}

// deadTemp leaves in dir a temporary of o's pattern that nobody holds,
// as a killed writer leaves it (its lock died with it).
func deadTemp(t *testing.T, dir string, o atomicfile.Options) string {
	t.Helper()
	name := o.TempName()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// watchCreate reports the name of each entry created in dir (inotify),
// until the returned stop is called.
func watchCreate(t *testing.T, dir string) (<-chan string, func()) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	names := make(chan string, 64)
	go func() {
		defer close(names)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00")
				select {
				case names <- string(name):
				default:
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return names, func() { f.Close() }
}

// waitName waits for a created name of o's pattern.
func waitName(t *testing.T, names <-chan string, o atomicfile.Options) string {
	t.Helper()
	deadline := time.After(60 * time.Second) // a hang guard, not a timing assertion
	for {
		select {
		case n, ok := <-names:
			if !ok {
				t.Fatal("the watch ended")
			}
			if o.Match(n) {
				return n
			}
		case <-deadline:
			t.Fatal("no temporary appeared in 60s")
		}
	}
}

// tent export --to over an existing file on a full disk leaves it whole,
// with its mode (it truncated it, wrote what fit and left it 0600); the
// next export into the directory removes the temporaries a killed export
// left, and not one being written.
func TestExportToFullDiskKeepsOld(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o777)
	writeOld(t, filepath.Join(src, "f"), "v1\n")
	r0 := l.tent(t, "create", "--cow", src+":/work")
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	l.tent(t, "exec", id, "--", "sh", "-c", "yes new | head -c 2097152 > /work/f && echo small > /work/g").expect(t, 0)

	// A killed export's temporaries: removed by the next export into
	// that directory; a live writer's kept.
	dir := t.TempDir()
	dead := deadTemp(t, dir, fslayer.ExportTemps)
	live := holdTemp(t, dir, fslayer.ExportTemps)
	l.tent(t, "export", id, "--to", dir).expect(t, 0)
	got := strings.Join(atomicfiletest.Names(t, dir), " ")
	if strings.Contains(got, dead) || !strings.Contains(got, live) {
		t.Errorf("after the next export %s holds %q: want %s removed, the live %s kept", dir, got, dead, live)
	}

	dst := atomicfiletest.SmallDisk(t, 1<<20, 0o777)
	old := strings.Repeat("old content\n", 1000)
	writeOld(t, filepath.Join(dst, "f"), old)
	r := l.tent(t, "export", id, "--to", dst)
	r.expect(t, 125, "no space left on device")
	// g may have been written before f failed; f is the old one.
	names := []string{"f"}
	if _, err := os.Stat(filepath.Join(dst, "g")); err == nil {
		names = append(names, "g")
	}
	checkUntouched(t, "export onto a full disk", filepath.Join(dst, "f"), old, names...)
}

// tent cp out over an existing file on a full disk leaves it whole with
// its mode; a tent cp out killed mid-copy leaves its temporary, which
// the next copy into that directory removes (files and directories of
// the pattern nobody holds; never a live one).
func TestCpOutFullDiskAndKill(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	l.tent(t, "exec", id, "--", "sh", "-c", "yes new | head -c 2097152 > /tmp/two; truncate -s 1G /tmp/big; echo small > /tmp/small").expect(t, 0)

	old := strings.Repeat("old content\n", 1000)

	// Killed while it writes: its temporary stays, the old file too.
	dir := t.TempDir()
	writeOld(t, filepath.Join(dir, "f"), old)
	names, stop := watchCreate(t, dir)
	cmd, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "cp", id + ":/tmp/big", filepath.Join(dir, "f")}}.start(t)
	tmp := waitName(t, names, transferpkg.CopyTemps)
	_ = cmd.Process.Kill()
	stop()
	wait(t, cmd, stdout, stderr, start)
	if got := atomicfiletest.Names(t, dir); len(got) != 2 {
		t.Fatalf("after the kill %s holds %q, want f and the temporary %s (did the copy end before the kill?)", dir, got, tmp)
	}
	checkUntouched(t, "cp out killed", filepath.Join(dir, "f"), old, "f", tmp)

	// A killed directory copy's temporary, and a writer still at work.
	deadDir := filepath.Join(dir, transferpkg.CopyTemps.TempName())
	if err := os.MkdirAll(filepath.Join(deadDir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	live := holdTemp(t, dir, transferpkg.CopyTemps)
	l.tent(t, "cp", id+":/tmp/small", filepath.Join(dir, "g")).expect(t, 0)
	want := []string{live, "f", "g"}
	slices.Sort(want)
	if got := atomicfiletest.Names(t, dir); !slices.Equal(got, want) {
		t.Errorf("after the next cp %s holds %q, want %q: the dead temporaries removed, the live %s kept", dir, got, want, live)
	}

	dst := atomicfiletest.SmallDisk(t, 1<<20, 0o777)
	writeOld(t, filepath.Join(dst, "f"), old)
	l.tent(t, "cp", id+":/tmp/two", filepath.Join(dst, "f")).expect(t, 125, "no space left on device")
	checkUntouched(t, "cp out onto a full disk", filepath.Join(dst, "f"), old, "f")
}

// tent cp into a sandbox over an existing file on a full disk leaves it
// whole with its mode (v1 became 4096 bytes of the new file); a file
// helper killed mid-write leaves its temporary, which the next write
// into that directory removes.
func TestCpInFullDiskAndKill(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	// A small disk only as root (an unprivileged run tests the rest).
	disk := ""
	args := []string{"create"}
	if os.Geteuid() == 0 {
		disk = atomicfiletest.SmallDisk(t, 1<<20, 0o777)
		args = append(args, "--rw", disk+":/disk")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	old := strings.Repeat("old content\n", 1000)
	writeOld(t, filepath.Join(dir, "f"), old)
	if disk != "" {
		writeOld(t, filepath.Join(disk, "f"), old)
	}
	r0 := l.tent(t, append(args, "--rw", dir+":/dir")...)
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's rw mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	host := t.TempDir()

	// The helper killed while it writes (a sparse 1 GiB source).
	big := filepath.Join(host, "big")
	bf, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := bf.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	bf.Close()
	names, stop := watchCreate(t, dir)
	cmd, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "cp", big, id + ":/dir/f"}}.start(t)
	tmp := waitName(t, names, files.WriteTemps)
	stop()
	if n := killHelper(t, "/dir/f"); n == 0 {
		t.Fatal("no file helper writing /dir/f was found")
	}
	wait(t, cmd, stdout, stderr, start)
	if got := atomicfiletest.Names(t, dir); len(got) != 2 {
		t.Fatalf("after the kill %s holds %q, want f and the temporary %s (did the copy end before the kill?)", dir, got, tmp)
	}
	checkUntouched(t, "cp in killed", filepath.Join(dir, "f"), old, "f", tmp)

	live := holdTemp(t, dir, files.WriteTemps)
	small := filepath.Join(host, "small")
	if err := os.WriteFile(small, []byte("small\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "cp", small, id+":/dir/g").expect(t, 0)
	got := strings.Join(atomicfiletest.Names(t, dir), " ")
	if strings.Contains(got, tmp) || !strings.Contains(got, live) || !strings.Contains(got, "g") {
		t.Errorf("after the next cp in %s holds %q: want %s removed, g written, the live %s kept", dir, got, tmp, live)
	}

	if disk == "" {
		t.Skip("the full disk needs root to mount a small tmpfs; the rest passed")
	}
	two := filepath.Join(host, "two")
	if err := os.WriteFile(two, bytes.Repeat([]byte("new\n"), 1<<19), 0o600); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "cp", two, id+":/disk/f").expect(t, 125, "no space left on device")
	checkUntouched(t, "cp in onto a full disk", filepath.Join(disk, "f"), old, "f")
	// Inside, as the sandbox sees it.
	r := l.tent(t, "exec", id, "--", "sh", "-c", "stat -c '%a %s' /disk/f; ls -A /disk")
	r.expect(t, 0)
	if want := fmt.Sprintf("644 %d\nf\n", len(old)); r.stdout != want {
		t.Errorf("inside: %q, want %q", r.stdout, want)
	}
}

// killHelper SIGKILLs the file helpers (argv[0] tent-fs) whose write
// names path; it returns how many.
func killHelper(t *testing.T, path string) int {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 3 && args[0] == files.FileHelperArg0 && args[1] == "write" && args[2] == path {
			var pid int
			if _, err := fmt.Sscan(p.Name(), &pid); err == nil && unix.Kill(pid, unix.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
