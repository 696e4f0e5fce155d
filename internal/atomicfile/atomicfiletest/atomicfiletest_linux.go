// Package atomicfiletest holds what the tests of tent's file writers
// share (package atomicfile and its callers): a full disk made cheaply,
// and a directory's listing.
package atomicfiletest

import (
	"fmt"
	"os"
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
