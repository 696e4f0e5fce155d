package files

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// Issue 36: a write that replaces a file the user had leaves, on a full
// disk or a kill, the old file or the whole new one.

// The helper's write onto a full disk fails with ENOSPC and leaves the
// old file whole, with its mode, and no temporary (it truncated the file
// and wrote what fitted).
func TestFileHelperWriteFullDiskKeepsOld(t *testing.T) {
	dir := atomicfiletest.SmallDisk(t, 256<<10, 0o755)
	p := filepath.Join(dir, "f")
	old := strings.Repeat("v1\n", 1000)
	atomicfiletest.WriteFileMode(t, p, old, 0o644)
	for _, op := range []string{"write", "put"} {
		code, _, errs := runHelper([]string{op, p, "600"}, bytes.NewReader(bytes.Repeat([]byte("new\n"), 1<<18)))
		if code != HelperFailed || !strings.HasPrefix(errs, "ENOSPC ") {
			t.Errorf("%s onto a full disk: %d %q, want ENOSPC", op, code, errs)
		}
		atomicfiletest.WantFile(t, op+" onto a full disk", p, old, 0o644, "f")
	}
}

// A write replaces the file a symlink names (as the sandbox would open
// it), keeping the old file's mode and metadata; the link stays a link.
// A new file gets the mode asked, less the umask.
func TestFileHelperWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	atomicfiletest.WriteFileMode(t, p, "v1", 0o640)
	meta := unix.Setxattr(p, MetadataXattrPrefix+"k", []byte("v"), 0) == nil
	if err := os.Symlink("f", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runHelper([]string{"write", filepath.Join(dir, "link"), "600"}, strings.NewReader("v2, longer")); code != 0 {
		t.Fatalf("write: %d %q", code, errs)
	}
	atomicfiletest.WantFile(t, "write through a link", p, "v2, longer", 0o640, "f", "link")
	if fi, err := os.Lstat(filepath.Join(dir, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link: %v %v, want the symlink kept", fi, err)
	}
	if meta {
		if got := readMetadata(p); got["k"] != "v" {
			t.Errorf("metadata after the write: %v, want k=v kept", got)
		}
	}
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	n := filepath.Join(dir, "new")
	if code, _, errs := runHelper([]string{"write", n, "666"}, strings.NewReader("x")); code != 0 {
		t.Fatalf("write new: %d %q", code, errs)
	}
	atomicfiletest.WantFile(t, "a new file", n, "x", 0o640, "f", "link", "new")
}

// A write removes the temporaries a killed helper left in the file's
// directory, and not one being written.
func TestFileHelperWriteCleansKilledTemps(t *testing.T) {
	dir := t.TempDir()
	dead := WriteTemps.TempName()
	atomicfiletest.WriteFileMode(t, filepath.Join(dir, dead), "half", 0o600)
	live, err := atomicfile.Create(filepath.Join(dir, "other"), 0o600, WriteTemps)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	if code, _, errs := runHelper([]string{"write", filepath.Join(dir, "f")}, strings.NewReader("x")); code != 0 {
		t.Fatalf("write: %d %q", code, errs)
	}
	atomicfiletest.WantFile(t, "after the write", filepath.Join(dir, "f"), "x", 0o644, "f", live.TempName())
}

// A file mounted over another cannot be renamed over: it is written in
// place, as before.
func TestFileHelperWriteMountedFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount a file")
	}
	dir := t.TempDir()
	p, src := filepath.Join(dir, "f"), filepath.Join(t.TempDir(), "src")
	atomicfiletest.WriteFileMode(t, p, "under", 0o644)
	atomicfiletest.WriteFileMode(t, src, "mounted", 0o600)
	if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(p, unix.MNT_DETACH)
	if code, _, errs := runHelper([]string{"write", p}, strings.NewReader("new")); code != 0 {
		t.Fatalf("write over a mounted file: %d %q", code, errs)
	}
	if b, _ := os.ReadFile(src); string(b) != "new" {
		t.Errorf("the mounted file holds %q, want new", b)
	}
}

// fallbackEnv has the test binary, run as another user by
// TestFileHelperWriteInPlaceFallback, run the file helper's write of the
// path it names, stdin "new", and exit with its code.
const fallbackEnv = "TENT_FS_TEST_WRITE_AS_USER"

// Where no temporary can replace a file the sandbox may write — its
// directory is not writable, or its owner is someone else whom a new
// file could not be given — the write goes in place, as before: it
// works, and the file keeps its owner.
func TestFileHelperWriteInPlaceFallback(t *testing.T) {
	if p := os.Getenv(fallbackEnv); p != "" {
		code, _, errs := runHelper([]string{"write", p}, strings.NewReader("new"))
		os.Stderr.WriteString(errs)
		os.Exit(code)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the helper as other users")
	}
	top := t.TempDir()
	os.Chmod(filepath.Dir(top), 0o755)
	os.Chmod(top, 0o755)
	bin := filepath.Join(top, "test.bin")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	const me, other = 12345, 23456
	for _, tc := range []struct {
		name     string
		dirMode  os.FileMode
		owner    int
		fileMode os.FileMode
	}{
		{"directory not writable", 0o755, me, 0o644},
		{"another user's file", 0o777, other, 0o666},
	} {
		dir := filepath.Join(top, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.Mkdir(dir, tc.dirMode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, tc.dirMode)
		p := filepath.Join(dir, "f")
		atomicfiletest.WriteFileMode(t, p, "old", tc.fileMode)
		if err := os.Chown(p, tc.owner, tc.owner); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestFileHelperWriteInPlaceFallback$")
		cmd.Env = append(os.Environ(), fallbackEnv+"="+p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: me, Gid: me}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: the write failed: %v %s", tc.name, err, out)
			continue
		}
		var st syscall.Stat_t
		b, _ := os.ReadFile(p)
		if err := syscall.Stat(p, &st); err != nil || string(b) != "new" || int(st.Uid) != tc.owner || os.FileMode(st.Mode&0o777) != tc.fileMode {
			t.Errorf("%s: %q, owner %d, mode %o (%v); want new, owner %d, mode %o", tc.name, b, st.Uid, st.Mode&0o777, err, tc.owner, tc.fileMode)
		}
	}
}
