package fs

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// victim is a host directory the sandbox must never reach through the
// host: files with known content, watched with inotify for any open,
// read, write or change of the directories or the files.
type victim struct {
	dir     string
	content []byte
	ifd     int
}

func newVictim(t *testing.T) *victim {
	t.Helper()
	v := &victim{dir: filepath.Join(t.TempDir(), "victim"), content: []byte("SECRET-victim-content\n")}
	for _, sub := range []string{"", "bin", "lib"} {
		if err := os.Mkdir(filepath.Join(v.dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"f", "bin/f", "lib/f"} {
		if err := os.WriteFile(filepath.Join(v.dir, p), v.content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	v.ifd = ifd
	t.Cleanup(func() { unix.Close(ifd) })
	const mask = unix.IN_OPEN | unix.IN_ACCESS | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CREATE |
		unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MOVE_SELF
	for _, p := range []string{"", "f", "bin", "lib", "bin/f", "lib/f"} {
		if _, err := unix.InotifyAddWatch(ifd, filepath.Join(v.dir, p), mask); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// drain discards pending inotify events (of the test's own set-up).
func (v *victim) drain() {
	buf := make([]byte, 64<<10)
	for {
		if _, err := unix.Read(v.ifd, buf); err != nil {
			return
		}
	}
}

// check fails the test if anything touched the victim since newVictim
// or the last check: an inotify event, or a file whose bytes changed.
func (v *victim) check(t *testing.T) {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Read(v.ifd, buf)
	if err != unix.EAGAIN {
		t.Errorf("the victim was touched: %d bytes of inotify events (%v)", n, err)
		if n >= unix.SizeofInotifyEvent {
			t.Errorf("first event: mask %#x", binary.NativeEndian.Uint32(buf[4:8]))
		}
	}
	for _, p := range []string{"f", "bin/f", "lib/f"} {
		b, err := os.ReadFile(filepath.Join(v.dir, p))
		if err != nil || !bytes.Equal(b, v.content) {
			t.Errorf("victim %s: %q, %v", p, b, err)
		}
	}
	if ents, _ := os.ReadDir(v.dir); len(ents) != 3 {
		t.Errorf("victim directory holds %d entries, want 3", len(ents))
	}
	v.drain() // the reads above
}

// noVictimContent fails the test if any file under root holds the
// victim's content.
func noVictimContent(t *testing.T, root string, v *victim) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, v.content) {
				t.Errorf("%s holds the victim's content", p)
			}
		}
		return nil
	})
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The sandbox ran `rm -rf /work/venv && ln -s /victim /work/venv`: the
// export deletes the old venv tree and creates the link, and must never
// delete through it.
func TestExportRemovesSymlinkInPlaceOfDirectory(t *testing.T) {
	lower, upper, dst := t.TempDir(), t.TempDir(), t.TempDir()
	for _, root := range []string{lower, dst} {
		mustWrite(t, filepath.Join(root, "venv/bin/f"), "python")
		mustWrite(t, filepath.Join(root, "venv/lib/f"), "site")
		mustWrite(t, filepath.Join(root, "venv/f"), "cfg")
	}
	v := newVictim(t)
	if err := os.Symlink(v.dir, filepath.Join(upper, "venv")); err != nil {
		t.Fatal(err)
	}
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) < 2 || changes[0] != (Change{Path: "venv", Kind: Deleted, Dir: true}) {
		t.Fatalf("diff: %+v", changes)
	}
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	v.check(t)
	if l, err := os.Readlink(filepath.Join(dst, "venv")); err != nil || l != v.dir {
		t.Errorf("dst/venv: %q, %v; want the link to %s", l, err, v.dir)
	}
	// A deletion listed beneath a symlink of dst is a no-op.
	if err := ApplyChanges(dst, upper, []Change{{Path: "venv/bin", Kind: Deleted, Dir: true}, {Path: "venv/f", Kind: Deleted}}); err != nil {
		t.Fatal(err)
	}
	v.check(t)
}

// exchanger swaps two paths with renameat2(RENAME_EXCHANGE) until
// halted, counting the swaps.
type exchanger struct {
	stop  chan struct{}
	done  sync.WaitGroup
	swaps atomic.Int64
	err   atomic.Value
}

func startExchanger(t *testing.T, a, b string) *exchanger {
	x := &exchanger{stop: make(chan struct{})}
	x.done.Add(1)
	go func() {
		defer x.done.Done()
		for {
			select {
			case <-x.stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				x.err.Store(err)
				return
			}
			x.swaps.Add(1)
		}
	}()
	t.Cleanup(func() { x.halt(t) })
	return x
}

func (x *exchanger) halt(t *testing.T) {
	t.Helper()
	select {
	case <-x.stop:
		return
	default:
	}
	close(x.stop)
	x.done.Wait()
	if err, _ := x.err.Load().(error); err != nil {
		t.Fatalf("renameat2(RENAME_EXCHANGE): %v", err)
	}
}

// A renameat2(RENAME_EXCHANGE) loop swaps upper's directory d with a
// symlink to the victim while Diff and ApplyChanges run. Before, export
// wrote d's files into the victim, and diff and export read the victim's
// files. Now neither may open, read or change anything of the victim
// (inotify sees nothing), nor copy its content. The race runs until the
// diff has seen each side of the swap 50 times (bounded by 20000 tries)
// and fails if it could not be staged.
func TestExportAndDiffRenameExchangeRace(t *testing.T) {
	lower, upper, out := t.TempDir(), t.TempDir(), t.TempDir()
	v := newVictim(t)
	mustWrite(t, filepath.Join(lower, "d/f"), "lower-content-of-the-same-size\n")
	mustWrite(t, filepath.Join(upper, "d/f"), "upper-content-of-the-same-size\n")
	mustWrite(t, filepath.Join(upper, "d/bin/f"), "upper")
	if err := os.Symlink(v.dir, filepath.Join(upper, "s")); err != nil {
		t.Fatal(err)
	}
	v.drain()
	x := startExchanger(t, filepath.Join(upper, "d"), filepath.Join(upper, "s"))
	var sawDir, sawLink, refused int
	tries := 0
	for ; tries < 20000 && (sawDir < 50 || sawLink < 50); tries++ {
		changes, err := Diff(lower, upper)
		if err != nil {
			t.Fatalf("diff: %v", err)
		}
		for _, c := range changes {
			switch {
			case c.Path == "d/bin" && c.Kind == Added: // d a directory over lower's
				sawDir++
			case c.Path == "d" && !c.Dir && c.Kind == Added:
				sawLink++
			}
		}
		dst := filepath.Join(out, "x")
		mustWrite(t, filepath.Join(dst, "d/f"), "lower-content-of-the-same-size\n")
		if err := ApplyChanges(dst, upper, changes); err != nil {
			// ELOOP: a symlink met on the way; EINVAL: an entry no longer
			// a symlink or regular file when read; EEXIST: a directory
			// where the changes put a file.
			if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EEXIST) {
				t.Fatalf("export failed otherwise than by refusing a swapped entry: %v", err)
			}
			refused++
		}
		noVictimContent(t, dst, v)
		if t.Failed() {
			break
		}
		if err := RemoveTree(dst); err != nil {
			t.Fatal(err)
		}
	}
	x.halt(t)
	v.check(t)
	t.Logf("%d tries, %d swaps; diff saw d as a directory %d times, as a link %d times; %d exports refused a swapped entry", tries, x.swaps.Load(), sawDir, sawLink, refused)
	if sawDir < 50 || sawLink < 50 {
		t.Fatalf("the race was not staged: d seen as a directory %d and as a link %d times in %d tries", sawDir, sawLink, tries)
	}
}

// A 1 GiB sparse file with three small runs of data costs its data, not
// its size, in export (copy) and in snapshot archives and restores
// (WriteTar, ExtractTar); and a plain archive entry of zeros is restored
// without writing them.
func TestSparseFilesKeepTheirHoles(t *testing.T) {
	lower, upper, dst := t.TempDir(), t.TempDir(), t.TempDir()
	const size = 1 << 30
	f, err := os.Create(filepath.Join(upper, "big"))
	if err != nil {
		t.Fatal(err)
	}
	marks := map[int64]string{0: "head", size / 2: "middle", size - 4: "tail"}
	for off, s := range marks {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	check := func(what, p string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if st.Size != size || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: size %d, %d bytes on disk; want %d and at most 1 MiB", what, st.Size, st.Blocks*512, size)
		}
		g, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for off, s := range marks {
			b := make([]byte, len(s))
			if _, err := g.ReadAt(b, off); err != nil || string(b) != s {
				t.Errorf("%s at %d: %q %v, want %q", what, off, b, err, s)
			}
		}
	}
	start := time.Now()
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	t.Logf("diff+export of a 1 GiB sparse file: %v", time.Since(start))
	check("export", filepath.Join(dst, "big"))

	var arch bytes.Buffer
	start = time.Now()
	if err := WriteTar(&arch, upper); err != nil {
		t.Fatal(err)
	}
	archived := arch.Len()
	if archived > 64<<10 {
		t.Errorf("the archive of a 1 GiB sparse file takes %d bytes, want at most 64 KiB", archived)
	}
	restored := t.TempDir()
	if err := ExtractTar(&arch, restored); err != nil {
		t.Fatal(err)
	}
	t.Logf("archive (%d bytes) and restore of a 1 GiB sparse file: %v", archived, time.Since(start))
	check("restore", filepath.Join(restored, "big"))

	// An entry of 64 MiB of zeros (an archive from elsewhere, or a file
	// of written zeros): restored as a hole.
	var plain bytes.Buffer
	tw := tar.NewWriter(&plain)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 64 << 20})
	io.Copy(tw, io.LimitReader(zeroReader{}, 64<<20))
	tw.Close()
	if err := ExtractTar(&plain, restored); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(restored, "zeros"), &st); err != nil || st.Size != 64<<20 || st.Blocks != 0 {
		t.Errorf("64 MiB of zeros restored as size %d, %d blocks (%v); want no blocks", st.Size, st.Blocks, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// FIFOs (in lower and upper, and a new one) neither hang nor are read by
// Diff, ApplyChanges and WriteTar: export recreates the new FIFO, the
// archive leaves FIFOs out.
func TestFIFOsNeverBlockTheHostSide(t *testing.T) {
	lower, upper, dst := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(lower, "p"), filepath.Join(upper, "p"), filepath.Join(upper, "new")} {
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A blocked open would hang here until the test binary's timeout.
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0] != (Change{Path: "new", Kind: Added}) {
		t.Errorf("changes %+v, want only new added", changes)
	}
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "new")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("dst/new: %v %v, want a FIFO", fi, err)
	}
	var arch bytes.Buffer
	if err := WriteTar(&arch, upper); err != nil {
		t.Fatal(err)
	}
	if hdr, err := tar.NewReader(&arch).Next(); err != io.EOF {
		t.Errorf("the archive holds %v (%v), want nothing", hdr, err)
	}
}

// mkdeep creates n nested directories "d" below root, descriptor-
// relative (the path is longer than PATH_MAX), and a file "f" with
// content at the bottom.
func mkdeep(t *testing.T, root string, n int, content string) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	w, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(w, []byte(content))
	unix.Close(w)
}

// readDeep reads the file at the bottom of a tree made by mkdeep.
func readDeep(t *testing.T, root string, n int) string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("level %d: %v", i, err)
		}
		fd = next
	}
	defer unix.Close(fd)
	r, err := unix.Openat(fd, "f", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(r)
	b := make([]byte, 64)
	k, _ := unix.Read(r, b)
	return string(b[:max(k, 0)])
}

// A tree 2100 levels deep (its paths beyond PATH_MAX, which made the
// path-based code fail with ENAMETOOLONG) is diffed, exported, archived,
// restored and removed; one deeper than MaxDepth fails with ErrTooDeep.
func TestDeepTrees(t *testing.T) {
	lower, upper, dst, restored := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	const n = 2100
	mkdeep(t, upper, n, "bottom")
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != n+1 {
		t.Fatalf("%d changes, want %d", len(changes), n+1)
	}
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	if got := readDeep(t, dst, n); got != "bottom" {
		t.Errorf("exported bottom file: %q", got)
	}
	var arch bytes.Buffer
	if err := WriteTar(&arch, upper); err != nil {
		t.Fatal(err)
	}
	if err := ExtractTar(&arch, restored); err != nil {
		t.Fatal(err)
	}
	if got := readDeep(t, restored, n); got != "bottom" {
		t.Errorf("restored bottom file: %q", got)
	}
	for _, d := range []string{dst, restored} {
		if err := RemoveTree(d); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("RemoveTree left %s: %v", d, err)
		}
	}

	deeper := t.TempDir()
	mkdeep(t, deeper, MaxDepth+2, "x")
	if _, err := Diff(lower, deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("diff of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	if err := WriteTar(io.Discard, deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("archive of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	if err := RemoveTree(deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("RemoveTree of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	long := strings.Repeat("d/", MaxDepth+1) + "f"
	if err := ApplyChanges(t.TempDir(), upper, []Change{{Path: long, Kind: Added}}); !errors.Is(err, ErrTooDeep) {
		t.Errorf("export of a path deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	os.RemoveAll(deeper)
}

// An archive's symlink is created, never followed, even when it points
// inside the directory: a later entry beneath it fails with ELOOP.
func TestExtractTarNeverFollowsItsSymlinks(t *testing.T) {
	dst := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "ln", Typeflag: tar.TypeSymlink, Linkname: "d"})
	tw.WriteHeader(&tar.Header{Name: "ln/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	if err := ExtractTar(&buf, dst); !errors.Is(err, unix.ELOOP) {
		t.Errorf("extracting ln/f through a symlink: %v, want ELOOP", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "d/f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d/f was written through the link: %v", err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "ln")); l != "d" {
		t.Errorf("ln: %q", l)
	}
}

// The file helper's read of a symlink to /dev/zero or of a FIFO, and its
// write to either, fail at once, sending or taking nothing.
func TestFileHelperOnlyReadsRegularFiles(t *testing.T) {
	dir := t.TempDir()
	zero, fifo := filepath.Join(dir, "zero"), filepath.Join(dir, "fifo")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"read", zero}, {"read", fifo}, {"write", fifo}, {"write", zero}, {"read", dir}} {
		var stdout, stderr bytes.Buffer
		code := RunFileHelper(args, strings.NewReader("data"), &stdout, &stderr)
		want := "EINVAL "
		switch {
		case args[1] == dir:
			want = "EISDIR "
		case args[0] == "write" && args[1] == fifo: // O_NONBLOCK: no reader, no wait
			want = "ENXIO "
		}
		if code != HelperFailed || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("%v: exit %d, %d bytes out, stderr %q; want %d, nothing, %s", args, code, stdout.Len(), stderr.String(), HelperFailed, want)
		}
	}
	reg := filepath.Join(dir, "reg")
	os.WriteFile(reg, []byte("hello"), 0o644)
	var stdout, stderr bytes.Buffer
	if code := RunFileHelper([]string{"read", reg}, nil, &stdout, &stderr); code != 0 || stdout.String() != "hello" {
		t.Errorf("read of a regular file: %d %q %q", code, stdout.String(), stderr.String())
	}
}
