package layer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// Issue 36: an export that replaces a file the user had leaves, on a
// full disk or a kill, the old file or the whole new one. The helpers
// come from atomicfiletest, as fs/files' atomic_write_test.go's.

// ApplyChanges (tent export --to) onto a full disk leaves the file it
// replaces whole, with its mode, and no temporary.
func TestApplyChangesFullDiskKeepsOld(t *testing.T) {
	dst := atomicfiletest.SmallDisk(t, 256<<10, 0o755)
	upper := t.TempDir()
	atomicfiletest.WriteFileMode(t, filepath.Join(upper, "f"), strings.Repeat("new\n", 1<<18), 0o600)
	old := strings.Repeat("v1\n", 1000)
	atomicfiletest.WriteFileMode(t, filepath.Join(dst, "f"), old, 0o644)
	err := ApplyChanges(dst, upper, []Change{{Path: "f", Kind: Modified}})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("export onto a full disk: %v, want ENOSPC", err)
	}
	atomicfiletest.WantFile(t, "export onto a full disk", filepath.Join(dst, "f"), old, 0o644, "f")
}

// ApplyChanges removes the temporaries a killed export left in the
// directories it writes, and not one being written; a symlink replaces a
// file as one step.
func TestApplyChangesCleansKilledTemps(t *testing.T) {
	dst, upper := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(upper, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dst, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.WriteFileMode(t, filepath.Join(upper, "d", "f"), "new", 0o644)
	if err := os.Symlink("f", filepath.Join(upper, "d", "l")); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.WriteFileMode(t, filepath.Join(dst, "d", "l"), "a file", 0o644)
	dead := ExportTemps.TempName()
	atomicfiletest.WriteFileMode(t, filepath.Join(dst, "d", dead), "half", 0o600)
	deadDir := filepath.Join(dst, "d", ExportTemps.TempName()) // a symlink's, killed
	if err := os.Mkdir(deadDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(deadDir, "entry")); err != nil {
		t.Fatal(err)
	}
	live, err := atomicfile.Create(filepath.Join(dst, "d", "other"), 0o600, ExportTemps)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	if err := ApplyChanges(dst, upper, []Change{{Path: "d/f", Kind: Added}, {Path: "d/l", Kind: Modified}}); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.WantFile(t, "after the export", filepath.Join(dst, "d", "f"), "new", 0o644, "f", "l", live.TempName())
	if l, err := os.Readlink(filepath.Join(dst, "d", "l")); err != nil || l != "f" {
		t.Errorf("d/l: %q %v, want the link", l, err)
	}
}
