package serve

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// volumeAt opens dir as a volume's data directory.
func volumeAt(t *testing.T, dir string) *volumeFS {
	t.Helper()
	v, err := openVolumeFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// wantVolume fails unless dir holds exactly names and dir/f holds
// content with mode perm.
func wantVolume(t *testing.T, what, dir, f, content string, perm os.FileMode, names ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, f))
	fi, serr := os.Stat(filepath.Join(dir, f))
	if err != nil || serr != nil || string(b) != content || fi.Mode().Perm() != perm {
		t.Errorf("%s: %s holds %q (%v, %v), want %q, mode %v", what, f, b, err, serr, content, perm)
	}
	got := dirNames(t, dir)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s: the volume holds %q, want %q (no temporary)", what, got, names)
	}
}

// racingReader creates path (a sandbox's file, made while the upload
// runs) on its first read.
type racingReader struct {
	path string
	r    io.Reader
}

func (r *racingReader) Read(p []byte) (int, error) {
	if r.path != "" {
		if err := os.WriteFile(r.path, []byte("the sandbox's"), 0o600); err != nil {
			return 0, err
		}
		r.path = ""
	}
	return r.r.Read(p)
}

// An upload that fails mid-way (its body breaks, the disk is full)
// leaves the file it was to replace as it was and no temporary; a name
// a sandbox made meanwhile is not replaced without force (409); a
// killed upload's temporaries go with the next upload into that
// directory, a live one's stay.
func TestVolumeWriteFaults(t *testing.T) {
	dir := t.TempDir()
	v := volumeAt(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the body broke")
	if _, err := v.writeFile("f", io.MultiReader(strings.NewReader("half"), iotest.ErrReader(boom)), 0o644, true); !errors.Is(err, boom) {
		t.Fatalf("an upload whose body breaks: %v, want %v", err, boom)
	}
	wantVolume(t, "an upload whose body broke", dir, "f", "old", 0o640, "f")

	_, err := v.writeFile("g", &racingReader{path: filepath.Join(dir, "g"), r: strings.NewReader("upload")}, 0o644, false)
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusConflict || he.msg != "Path /g already exists" {
		t.Fatalf("an upload whose name a sandbox took meanwhile: %v, want 409 Path /g already exists", err)
	}
	wantVolume(t, "an upload whose name a sandbox took", dir, "g", "the sandbox's", 0o600, "f", "g")

	dead := uploadTemps.TempName()
	if err := os.WriteFile(filepath.Join(dir, dead), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	live, err := createLive(int(d.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	if _, err := v.writeFile("f", strings.NewReader("new"), 0o604, true); err != nil {
		t.Fatal(err)
	}
	wantVolume(t, "the next upload", dir, "f", "new", 0o604, "f", "g", live.TempName())

	full := atomicfiletest.SmallDisk(t, 64<<10, 0o700)
	if err := os.WriteFile(filepath.Join(full, "f"), []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	vf := volumeAt(t, full)
	if _, err := vf.writeFile("f", strings.NewReader(strings.Repeat("x", 1<<20)), 0o644, true); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("an upload larger than the disk: %v, want ENOSPC", err)
	}
	wantVolume(t, "an upload onto a full disk", full, "f", "old", 0o640, "f")
}

// createLive starts an upload's temporary in dirfd that this test holds
// (a writer at work).
func createLive(dirfd int) (*atomicfile.File, error) {
	return atomicfile.CreateAt(dirfd, "other", 0o600, uploadTemps)
}
