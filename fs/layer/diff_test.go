package layer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDiffOfAnUpperLayer(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	write := func(root, p, c string) {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(lower, "same", "s")
	write(lower, "edit", "old")
	write(lower, "gone", "g")
	write(lower, "opaque/old", "o")
	write(lower, "chmod", "c")
	write(upper, "same", "s") // copied up, unchanged: no change
	write(upper, "edit", "new")
	write(upper, "added/file", "a")
	write(upper, "opaque/fresh", "f")
	write(upper, "chmod", "c")
	os.Chmod(filepath.Join(upper, "chmod"), 0o600)
	if err := unix.Mknod(filepath.Join(upper, "gone"), unix.S_IFCHR, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skip("creating a whiteout needs CAP_MKNOD")
		}
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "opaque"), opaqueXattr, []byte("y"), 0); err != nil {
		t.Skipf("user xattrs unsupported here: %v", err)
	}
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ChangeKind{}
	for _, c := range changes {
		got[c.Path] = c.Kind
	}
	want := map[string]ChangeKind{"edit": Modified, "gone": Deleted, "added": Added, "added/file": Added,
		"opaque/old": Deleted, "opaque/fresh": Added, "chmod": Modified}
	if len(got) != len(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q", p, got[p], k)
		}
	}
	// ApplyChanges onto a copy of lower reproduces the merged view.
	dst := t.TempDir()
	write(dst, "same", "s")
	write(dst, "edit", "old")
	write(dst, "gone", "g")
	write(dst, "opaque/old", "o")
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{"same": "s", "edit": "new", "added/file": "a", "opaque/fresh": "f"} {
		if b, _ := os.ReadFile(filepath.Join(dst, p)); string(b) != c {
			t.Errorf("%s = %q, want %q", p, b, c)
		}
	}
	for _, p := range []string{"gone", "opaque/old"} {
		if _, err := os.Stat(filepath.Join(dst, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived ApplyChanges", p)
		}
	}
}
