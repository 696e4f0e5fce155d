// Package atomicfiletest holds what the tests of tent's file writers
// share (package atomicfile and its callers): a full disk made cheaply,
// and a directory's listing.
package atomicfiletest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallDisk mounts a tmpfs of size bytes, with mode, on a new directory
// (nosuid, nodev) and unmounts it when the test ends: a write past size
// fails with ENOSPC. It needs root: the unprivileged run skips the test,
// saying why.
func SmallDisk(t testing.TB, size int, mode os.FileMode) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a full disk); the unprivileged run cannot")
	}
	dir := t.TempDir()
	opts := fmt.Sprintf("size=%d,mode=%04o", size, mode.Perm())
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mounting a tmpfs (%s): %v", opts, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Names returns the names of dir's entries, sorted.
func Names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// WriteFileMode writes content to p with exactly perm (the umask aside).
func WriteFileMode(t testing.TB, p, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

// WantFile fails the test unless p holds content with perm and its
// directory holds names (in any order) and nothing else: what a replace
// that failed or was killed must leave (the old file whole, no
// temporary).
func WantFile(t testing.TB, what, p, content string, perm os.FileMode, names ...string) {
	t.Helper()
	b, err := os.ReadFile(p)
	fi, serr := os.Lstat(p)
	if err != nil || serr != nil || string(b) != content || fi.Mode() != perm {
		t.Errorf("%s: %s holds %d bytes (%v), mode %v (%v); want %d bytes, mode %v", what, p, len(b), err, fi.Mode(), serr, len(content), perm)
	}
	names = slices.Sorted(slices.Values(names))
	if got := Names(t, filepath.Dir(p)); !slices.Equal(got, names) {
		t.Errorf("%s: the directory holds %q, want %q", what, got, names)
	}
}
