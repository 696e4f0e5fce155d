package layer

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

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
