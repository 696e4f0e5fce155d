package atomicfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// childEnv has the test binary, started by TestCleanAfterKill, create a
// temporary in that directory, write to it, say "ready" and wait to be
// killed.
const childEnv = "ATOMICFILE_TEST_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(child(dir))
	}
	os.Exit(m.Run())
}

func child(dir string) int {
	f, err := Create(filepath.Join(dir, "file"), 0o644, Options{Prefix: ".kill-"})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := f.Write(bytes.Repeat([]byte("x"), 1<<20)); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // killed meanwhile
	return 0
}

func openDir(t *testing.T, dir string) int {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return int(d.Fd())
}

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new content"), 0o644, Options{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "new content" || fi.Mode().Perm() != 0o644 {
		t.Fatalf("after the write: %q %v, mode %v; want the new content, mode 0644", b, err, fi.Mode())
	}
	if ns := atomicfiletest.Names(t, dir); len(ns) != 1 {
		t.Fatalf("the directory holds %q, want the file alone", ns)
	}
}

// A symlink at the destination is replaced, never written through.
func TestWriteFileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAt(openDir(t, dir), "f", 0o600, Options{}, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("the symlink's target became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "f")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("f is %v (%v), want a regular file", fi, err)
	}
}

// A failed fill leaves the old file as it was and no temporary.
func TestFailedWriteKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFileAt(openDir(t, dir), "f", 0o600, Options{}, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	checkOld(t, dir, "f", "old", 0o640)
}

// checkOld fails unless dir holds name alone, with content and perm.
func checkOld(t *testing.T, dir, name, content string, perm os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	fi, serr := os.Stat(p)
	if err != nil || serr != nil || string(b) != content || fi.Mode().Perm() != perm {
		t.Fatalf("%s: %q (%v), mode %v (%v); want %q, mode %v", name, b, err, fi.Mode(), serr, content, perm)
	}
	if ns := atomicfiletest.Names(t, dir); len(ns) != 1 {
		t.Fatalf("the directory holds %q, want %s alone", ns, name)
	}
}

// On a full disk the old file stays, whole, with its mode, and the
// temporary is gone.
func TestFullDiskKeepsOld(t *testing.T) {
	dir := atomicfiletest.SmallDisk(t, 64<<10, 0o755)
	p := filepath.Join(dir, "f")
	old := strings.Repeat("o", 8<<10)
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(p, bytes.Repeat([]byte("n"), 1<<20), 0o600, Options{})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ENOSPC", err)
	}
	checkOld(t, dir, "f", old, 0o644)
}

// Clean removes temporaries nobody holds, and only those: not a live
// writer's, not a symlink, a FIFO or a name of another pattern.
func TestClean(t *testing.T) {
	dir := t.TempDir()
	dirfd := openDir(t, dir)
	o := Options{Prefix: ".x-", Suffix: ".tmp"}
	live, err := CreateAt(dirfd, "f", 0o644, o)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	stale := o.TempName()
	if err := os.WriteFile(filepath.Join(dir, stale), []byte("left"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link, fifo := o.TempName(), o.TempName()
	if err := os.Symlink(outside, filepath.Join(dir, link)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, fifo), 0o600); err != nil {
		t.Fatal(err)
	}
	other := []string{".x-12.tmp.bak", ".x-zz.tmp", ".x-.tmp", "x-12.tmp", ".y-12.tmp"}
	for _, n := range other {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := o.Clean(dirfd)
	if err != nil || n != 1 {
		t.Fatalf("Clean = %d, %v; want 1 removed", n, err)
	}
	want := append([]string{live.TempName(), link, fifo}, other...)
	got := atomicfiletest.Names(t, dir)
	if len(got) != len(want) {
		t.Fatalf("left %q, want %q", got, want)
	}
	for _, w := range want {
		if _, err := os.Lstat(filepath.Join(dir, w)); err != nil {
			t.Fatalf("%s was removed", w)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("the symlink's target became %q", b)
	}
	if err := live.Commit(); err != nil {
		t.Fatalf("the live writer's commit: %v", err)
	}
}

// A writer killed mid-write leaves its temporary; the next Clean removes
// it (and not while the writer lives).
func TestCleanAfterKill(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q", line)
	}
	o := Options{Prefix: ".kill-"}
	dirfd := openDir(t, dir)
	if n, err := o.Clean(dirfd); n != 0 || err != nil {
		t.Fatalf("Clean while the writer lives = %d, %v; want nothing removed", n, err)
	}
	if ns := atomicfiletest.Names(t, dir); len(ns) != 1 || !o.Match(ns[0]) {
		t.Fatalf("while the writer lives: %q, want its temporary", ns)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if n, err := o.Clean(dirfd); n != 1 || err != nil {
		t.Fatalf("Clean after the kill = %d, %v; want 1 removed", n, err)
	}
	if ns := atomicfiletest.Names(t, dir); len(ns) != 0 {
		t.Fatalf("after the kill and Clean: %q, want nothing", ns)
	}
}

// A temporary directory is cleaned with its contents, never through a
// symlink inside it.
func TestCleanDir(t *testing.T) {
	dir := t.TempDir()
	dirfd := openDir(t, dir)
	o := Options{Prefix: ".d-", Dirs: true}
	live, err := MkdirAt(dirfd, o)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, o.TempName())
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(stale, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(stale, "a", "out")); err != nil {
		t.Fatal(err)
	}
	noDirs := o
	noDirs.Dirs = false
	if n, err := noDirs.Clean(dirfd); n != 0 || err != nil {
		t.Fatalf("Clean without Dirs = %d, %v; want directories left alone", n, err)
	}
	if n, err := o.Clean(dirfd); n != 1 || err != nil {
		t.Fatalf("Clean = %d, %v; want 1", n, err)
	}
	if ns := atomicfiletest.Names(t, dir); len(ns) != 1 || ns[0] != live.Name() {
		t.Fatalf("left %q, want the live %s", ns, live.Name())
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "keep" {
		t.Fatal("a file behind the symlink was removed")
	}
	if err := live.Commit("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "d")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("d: %v %v", fi, err)
	}
}

func TestMatch(t *testing.T) {
	o := Options{Prefix: ".serve-state.json.tmp-"}
	for name, want := range map[string]bool{
		".serve-state.json.tmp-1234567890":                 true, // os.CreateTemp's, of older tents
		".serve-state.json.tmp-" + strings.Repeat("a", 16): true,
		".serve-state.json.tmp-":                           false,
		".serve-state.json.tmp-12/x":                       false,
		"serve-state.json":                                 false,
		".serve-state.json.tmp-" + strings.Repeat("a", 33): false,
	} {
		if got := o.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
	if !o.Match(o.TempName()) {
		t.Error("TempName does not Match")
	}
}

// PlaceAt replaces a file with a symlink as one step, leaving no
// temporary; a failure of mk leaves the old file.
func TestPlaceAt(t *testing.T) {
	dir := t.TempDir()
	dirfd := openDir(t, dir)
	o := Options{Prefix: ".p-", Dirs: true}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := PlaceAt(dirfd, "f", o, func(int, string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("PlaceAt = %v, want boom", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "old" || len(atomicfiletest.Names(t, dir)) != 1 {
		t.Fatalf("after a failed PlaceAt: %q, %q", b, atomicfiletest.Names(t, dir))
	}
	if err := PlaceAt(dirfd, "f", o, func(d int, n string) error { return unix.Symlinkat("target", d, n) }); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "f")); err != nil || l != "target" || len(atomicfiletest.Names(t, dir)) != 1 {
		t.Fatalf("after PlaceAt: %q %v, %q", l, err, atomicfiletest.Names(t, dir))
	}
}

// Renamed tells a Commit that failed before the rename (the destination
// as it was) from one whose file is in place: false before Commit and
// after one refused, true once the temporary is the destination.
func TestRenamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := CreateAt(openDir(t, dir), "f", 0o600, Options{NoReplace: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.Renamed() {
		t.Error("Renamed before Commit")
	}
	if err := f.Commit(); !errors.Is(err, unix.EEXIST) || f.Renamed() {
		t.Errorf("Commit over an existing file with NoReplace: %v, Renamed %v; want EEXIST, false", err, f.Renamed())
	}
	checkOld(t, dir, "f", "old", 0o600)
	g, err := CreateAt(openDir(t, dir), "g", 0o600, Options{NoReplace: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(); err != nil || !g.Renamed() {
		t.Errorf("Commit of a new file: %v, Renamed %v; want nil, true", err, g.Renamed())
	}
	f.Abort() // after Commit or a refused one: nothing
	g.Abort()
	if got := atomicfiletest.Names(t, dir); strings.Join(got, " ") != "f g" {
		t.Errorf("the directory holds %q, want f g", got)
	}
}

// Clean removes as it reads, batch by batch (what it holds is bounded
// however many names the directory has): every dead temporary of
// several batches goes, the live one and the others' stay.
func TestCleanManyBatches(t *testing.T) {
	dir := t.TempDir()
	o := Options{Prefix: ".many-", Suffix: ".tmp"}
	for range 3000 {
		if err := os.WriteFile(filepath.Join(dir, o.TempName()), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("keep-%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live, err := Create(filepath.Join(dir, "f"), 0o600, o)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	n, err := o.Clean(openDir(t, dir))
	if err != nil || n != 3000 {
		t.Fatalf("Clean = %d, %v; want 3000 removed", n, err)
	}
	left := atomicfiletest.Names(t, dir)
	if len(left) != 501 || !slices.Contains(left, live.TempName()) {
		t.Errorf("after Clean %d names are left (the live temporary among them: %v), want the 500 others and it", len(left), slices.Contains(left, live.TempName()))
	}
}

// Clean reads MaxCleanScan names of a directory at most: a directory a
// sandbox filled costs each write a bounded time; the next calls remove
// the rest.
func TestCleanScanIsBounded(t *testing.T) {
	dir := atomicfiletest.SmallDisk(t, 64<<20, 0o755) // tmpfs: fast creates
	o := Options{Prefix: ".flood-", Suffix: ".tmp"}
	const total = MaxCleanScan + 4096
	for range total {
		fd, err := unix.Open(filepath.Join(dir, o.TempName()), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	dfd := openDir(t, dir)
	first, err := o.Clean(dfd)
	if err != nil || first < MaxCleanScan-1024 || first >= total {
		t.Fatalf("the first Clean removed %d of %d (%v): want at most the first %d names read, batch by batch", first, total, err, MaxCleanScan)
	}
	second, err := o.Clean(dfd)
	if err != nil || first+second != total {
		t.Fatalf("the second Clean removed %d (%v): want the %d left", second, err, total-first)
	}
}
