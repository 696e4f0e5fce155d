package layer

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The way before fchmodat2 (Linux 6.6, missing on 6.1, where removing a
// cow layer's mode-000 work/work failed with EACCES): it changes the
// directory itself, and never what a symlink in its place points to.
func TestChmodOPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if err := chmodOPath(dfd, "locked", 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "locked")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("locked: %v %v, want mode 0700", fi, err)
	}
	if err := chmodOPath(dfd, "link", 0o777); err != unix.ELOOP {
		t.Fatalf("chmod of a symlink: %v, want ELOOP", err)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the symlink's target became %v", fi.Mode())
	}
	// RemoveTree gets through a mode-000 directory holding more.
	if err := os.WriteFile(filepath.Join(dir, "locked", "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("RemoveTree left %s: %v", dir, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("RemoveTree removed the symlink's target: %v", err)
	}
}
