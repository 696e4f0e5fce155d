//go:build linux

package layer

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
)

// WriteTarFromExcept leaves out what except names, with everything
// beneath it, and files of another filesystem; it archives symlinks as
// text and skips FIFOs without opening them.
func TestWriteTarFromExcept(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"keep/sub", "mnt/inner", "home/user"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "keep/sub/f"), []byte("f"), 0o644)
	os.WriteFile(filepath.Join(dir, "mnt/inner/g"), []byte("g"), 0o644)
	os.WriteFile(filepath.Join(dir, "home/user/h"), []byte("h"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(dir, "evil"))
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var buf bytes.Buffer
	except := map[string]bool{"mnt": true, "home/user": true}
	if err := WriteTarFromExcept(&buf, d, func(rel string) bool { return except[rel] }); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+":"+h.Linkname)
	}
	sort.Strings(got)
	want := []string{"evil:/etc/shadow", "home/:", "keep/:", "keep/sub/:", "keep/sub/f:"}
	if len(got) != len(want) {
		t.Fatalf("archived %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("archived %q, want %q", got, want)
		}
	}
}
