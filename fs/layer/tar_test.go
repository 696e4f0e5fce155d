package layer

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTarRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "d/e"), 0o750)
	os.WriteFile(filepath.Join(src, "d/e/f"), []byte("content"), 0o640)
	os.Symlink("d/e/f", filepath.Join(src, "link"))
	whiteout := unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0) == nil
	opaque := unix.Setxattr(filepath.Join(src, "d"), opaqueXattr, []byte("y"), 0) == nil
	var buf bytes.Buffer
	if err := WriteTar(&buf, src); err != nil {
		t.Fatal(err)
	}
	if err := ExtractTar(&buf, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "d/e/f")); err != nil || string(b) != "content" {
		t.Errorf("file: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "d/e/f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: %v %v", fi.Mode(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "link")); l != "d/e/f" {
		t.Errorf("symlink: %q", l)
	}
	if whiteout {
		fi, err := os.Lstat(filepath.Join(dst, "gone"))
		if err != nil || !isWhiteout(fi) {
			t.Errorf("whiteout not restored: %v %v", fi, err)
		}
	}
	if opaque && !isOpaquePath(t, filepath.Join(dst, "d")) {
		t.Error("opaque attribute not restored")
	}
}

func TestExtractTarRefusesEscapes(t *testing.T) {
	for _, entries := range [][]*tar.Header{
		{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "ln", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "ln/passwd", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			tw.WriteHeader(h)
		}
		tw.Close()
		outside := t.TempDir()
		dst := filepath.Join(outside, "dst")
		os.Mkdir(dst, 0o755)
		err := ExtractTar(&buf, dst)
		if err == nil {
			t.Errorf("%s: extracted without error", entries[len(entries)-1].Name)
		}
		if _, serr := os.Stat(filepath.Join(outside, "evil")); serr == nil || strings.Contains(err.Error(), "passwd") && false {
			t.Errorf("an entry escaped the directory")
		}
	}
}

// isOpaquePath reports whether the directory at p is an opaque overlay
// directory.
func isOpaquePath(t *testing.T, p string) bool {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer unix.Close(fd)
	return isOpaque(fd)
}
