package fs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// MakeMountPoints creates what is missing beneath the root, files for
// binds of files, and never follows a symlink the root's tree holds: a
// planted one fails with ELOOP and nothing is made where it points.
func TestMakeMountPoints(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	file := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(PlanInput{Root: &Mount{Source: root, Target: "/", Access: ReadWrite}, Home: "/root",
		Mounts: []Mount{{Source: file, Target: "/etc/hosts", Access: ReadOnly}}, Tmpfs: []string{"/run"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := MakeMountPoints(root, plan); err != nil {
		t.Fatal(err)
	}
	for p, dir := range map[string]bool{"proc": true, "dev": true, "run": true, "etc/hosts": false} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil || fi.IsDir() != dir {
			t.Errorf("%s: %v (dir %v, want %v)", p, err, err == nil && fi.IsDir(), dir)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "dev", "null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dev/null, beneath tent's /dev tmpfs, was made in the root: %v", err)
	}

	hostile := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(hostile, "etc")); err != nil {
		t.Fatal(err)
	}
	err = MakeMountPoints(hostile, plan)
	if !errors.Is(err, unix.ELOOP) {
		t.Errorf("a symlinked /etc: want ELOOP, got %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("made %v where the planted symlink points", entries)
	}
}
