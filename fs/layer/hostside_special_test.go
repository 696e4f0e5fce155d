package layer

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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
