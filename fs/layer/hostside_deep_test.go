package layer

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mkdeep creates n nested directories "d" below root, descriptor-
// relative (the path is longer than PATH_MAX), and a file "f" with
// content at the bottom.
func mkdeep(t *testing.T, root string, n int, content string) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	w, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(w, []byte(content))
	unix.Close(w)
}

// readDeep reads the file at the bottom of a tree made by mkdeep.
func readDeep(t *testing.T, root string, n int) string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("level %d: %v", i, err)
		}
		fd = next
	}
	defer unix.Close(fd)
	r, err := unix.Openat(fd, "f", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(r)
	b := make([]byte, 64)
	k, _ := unix.Read(r, b)
	return string(b[:max(k, 0)])
}

// A tree 2100 levels deep (its paths beyond PATH_MAX, which made the
// path-based code fail with ENAMETOOLONG) is diffed, exported, archived,
// restored and removed; one deeper than MaxDepth fails with ErrTooDeep.
func TestDeepTrees(t *testing.T) {
	lower, upper, dst, restored := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	const n = 2100
	mkdeep(t, upper, n, "bottom")
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != n+1 {
		t.Fatalf("%d changes, want %d", len(changes), n+1)
	}
	if err := ApplyChanges(dst, upper, changes); err != nil {
		t.Fatal(err)
	}
	if got := readDeep(t, dst, n); got != "bottom" {
		t.Errorf("exported bottom file: %q", got)
	}
	var arch bytes.Buffer
	if err := WriteTar(&arch, upper); err != nil {
		t.Fatal(err)
	}
	if err := ExtractTar(&arch, restored); err != nil {
		t.Fatal(err)
	}
	if got := readDeep(t, restored, n); got != "bottom" {
		t.Errorf("restored bottom file: %q", got)
	}
	for _, d := range []string{dst, restored} {
		if err := RemoveTree(d); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("RemoveTree left %s: %v", d, err)
		}
	}

	deeper := t.TempDir()
	mkdeep(t, deeper, MaxDepth+2, "x")
	if _, err := Diff(lower, deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("diff of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	if err := WriteTar(io.Discard, deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("archive of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	if err := RemoveTree(deeper); !errors.Is(err, ErrTooDeep) {
		t.Errorf("RemoveTree of a tree deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	long := strings.Repeat("d/", MaxDepth+1) + "f"
	if err := ApplyChanges(t.TempDir(), upper, []Change{{Path: long, Kind: Added}}); !errors.Is(err, ErrTooDeep) {
		t.Errorf("export of a path deeper than MaxDepth: %v, want ErrTooDeep", err)
	}
	os.RemoveAll(deeper)
}
