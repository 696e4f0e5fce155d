//go:build linux

package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// provision starts a sandbox on a Local backend, gone with the test.
func provision(t *testing.T) sandbox.Handle {
	t.Helper()
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	info, err := l.Provision(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Open(context.Background(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sh runs script in the sandbox and returns its stdout.
func sh(t *testing.T, h sandbox.Handle, script string) string {
	t.Helper()
	var out, errs bytes.Buffer
	res, err := h.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errs})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v, %v: %s", script, res, err, errs.String())
	}
	return out.String()
}

// Out of a sandbox: a directory recursively (symlinks as links, FIFOs
// left out, permission bits kept, sparse files sparse), into an existing
// directory as DST/NAME, never merged; a file, a symlink, -L; a limit;
// errors that name the path and match their sentinels, each leaving the
// host as it was.
func TestCopyOut(t *testing.T) {
	ctx := context.Background()
	h := provision(t)
	sh(t, h, `set -e; mkdir -p /tmp/d/sub /tmp/d/empty; printf a > /tmp/d/a; printf 'b b' > "/tmp/d/sub/b c"
		chmod 750 /tmp/d/sub; chmod 700 /tmp/d/a; ln -s /etc/passwd /tmp/d/abs; ln -s ../a /tmp/d/sub/rel; mkfifo /tmp/d/fifo
		truncate -s 1G /tmp/d/big; printf tail >> /tmp/d/big; printf 0123456789 > /tmp/ten; mkfifo /tmp/fifo`)
	host := t.TempDir()
	out := filepath.Join(host, "out")
	limit := Options{MaxSize: 2 << 30}
	if err := CopyOut(ctx, h, "/tmp/d", out, limit); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(out, "big"), &st); err != nil || st.Size != 1<<30+4 || st.Blocks*512 > 1<<20 {
		t.Errorf("big: size %d, %d bytes on disk (%v); want %d and at most 1 MiB", st.Size, st.Blocks*512, err, 1<<30+4)
	}
	if err := os.Remove(filepath.Join(out, "big")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a": "f -rwx------ a", "sub": "d -rwxr-x---", "sub/b c": "f -rw-r--r-- b b", "sub/rel": "l ../a",
		"abs": "l /etc/passwd", "empty": "d -rwxr-xr-x",
	}
	sameTree(t, "CopyOut /tmp/d out", hostTree(t, out), want)
	// An existing directory: the copy lands in it as DIR/NAME, and is
	// never merged into an existing DIR/NAME.
	if err := CopyOut(ctx, h, "/tmp/d/sub", filepath.Join(out, "empty"), limit); err != nil {
		t.Fatal(err)
	}
	want["empty/sub"], want["empty/sub/b c"], want["empty/sub/rel"] = want["sub"], want["sub/b c"], want["sub/rel"]
	err := CopyOut(ctx, h, "/tmp/d/sub", out, limit)
	var ee *ExistsError
	if !errors.As(err, &ee) || ee.Path != filepath.Join(out, "sub") || ee.Meanwhile || !errors.Is(err, iofs.ErrExist) {
		t.Errorf("a merge: %v, want an ExistsError for %s", err, filepath.Join(out, "sub"))
	}
	sameTree(t, "after the refused merge", hostTree(t, out), want)

	// Files, symlinks, -L, and refusals that leave the destination.
	keep := filepath.Join(host, "keep")
	if err := os.WriteFile(keep, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	var te *TypeError
	for _, tc := range []struct {
		src, dst string
		opts     Options
		check    func(error) bool
		msg      string
	}{
		{"/typo", keep, limit, func(err error) bool { return errors.Is(err, iofs.ErrNotExist) }, "stat /typo: no such file or directory"},
		{"/tmp/ten", keep, Options{MaxSize: 4}, func(err error) bool { return errors.Is(err, ErrTooLarge) }, "/tmp/ten is larger than 4 bytes"},
		{"/tmp/fifo", keep, limit, func(err error) bool { return errors.As(err, &te) && te.TypeName() == "named pipe" },
			"/tmp/fifo is a named pipe: only regular files, directories and symlinks are copied"},
		{"/tmp/d", keep, limit, func(err error) bool { return err != nil }, "cannot copy a directory over " + keep + ", which is not a directory"},
		{"/tmp/ten", host + "/nodir/", limit, func(err error) bool { return err != nil }, "the destination directory " + host + "/nodir/ does not exist"},
		{"/tmp/d", out + "/sub/", Options{MaxSize: 4}, func(err error) bool { return errors.Is(err, ErrTooLarge) }, "big: the copy is larger than 4 bytes"},
	} {
		err := CopyOut(ctx, h, tc.src, tc.dst, tc.opts)
		if !tc.check(err) || err.Error() != tc.msg {
			t.Errorf("CopyOut %s %s: %v, want %q", tc.src, tc.dst, err, tc.msg)
		}
	}
	sameTree(t, "after the failed copies", hostTree(t, host), func() map[string]string {
		m := map[string]string{"keep": "f -rw------- precious", "out": "d -rwxr-xr-x"}
		for k, v := range want {
			m["out/"+k] = v
		}
		return m
	}())
	if err := CopyOut(ctx, h, "/tmp/ten", keep, limit); err != nil {
		t.Fatal(err)
	}
	if err := CopyOut(ctx, h, "/tmp/d/abs", host, limit); err != nil {
		t.Fatal(err)
	}
	if err := CopyOut(ctx, h, "/tmp/d/sub/rel", filepath.Join(host, "followed"), Options{FollowLink: true, MaxSize: 1}); err != nil {
		t.Fatal(err)
	}
	got := hostTree(t, host)
	for k, v := range map[string]string{"keep": "f -rw-r--r-- 0123456789", "abs": "l /etc/passwd"} {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// FollowLink copies the target's contents (with the link's mode bits:
	// the helper's stat does not follow).
	if fi, err := os.Lstat(filepath.Join(host, "followed")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("followed: %v, %v; want a regular file", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "followed")); err != nil || string(b) != "a" {
		t.Errorf("followed: %q, %v; want the target's contents", b, err)
	}
}

// CopyOutTo writes a file's contents, a directory as a tar archive of
// what is copied, and refuses a symlink unless it follows it.
func TestCopyOutTo(t *testing.T) {
	ctx := context.Background()
	h := provision(t)
	sh(t, h, `set -e; mkdir -p /tmp/d/sub; printf a > /tmp/d/a; printf b > /tmp/d/sub/b; ln -s a /tmp/d/l; mkfifo /tmp/d/p`)
	var buf bytes.Buffer
	if err := CopyOutTo(ctx, h, "/tmp/d/a", &buf, Options{MaxSize: 1}); err != nil || buf.String() != "a" {
		t.Errorf("a file: %q, %v", buf.String(), err)
	}
	buf.Reset()
	err := CopyOutTo(ctx, h, "/tmp/d/l", &buf, Options{MaxSize: 1})
	var te *TypeError
	if !errors.As(err, &te) || te.Path != "/tmp/d/l" || te.Link != "a" || te.Mode != iofs.ModeSymlink || buf.Len() != 0 {
		t.Errorf("a symlink: %v, %q; want a TypeError naming its target", err, buf.String())
	}
	if err := CopyOutTo(ctx, h, "/tmp/d/l", &buf, Options{MaxSize: 1, FollowLink: true}); err != nil || buf.String() != "a" {
		t.Errorf("a symlink followed: %q, %v", buf.String(), err)
	}
	buf.Reset()
	if err := CopyOutTo(ctx, h, "/tmp/d", &buf, Options{MaxSize: 2}); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "a,l,sub/,sub/b" {
		t.Errorf("a directory: entries %q, want a,l,sub/,sub/b", got)
	}
	if err := CopyOutTo(ctx, h, "/tmp/d", io.Discard, Options{MaxSize: 1}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a directory over the limit: %v, want ErrTooLarge", err)
	}
}

// Into a sandbox: a host tree as is (modes, symlinks as links), into an
// existing directory or to a new name; a file into a directory; stdin's
// stream; and refusals.
func TestCopyIn(t *testing.T) {
	ctx := context.Background()
	h := provision(t)
	host := t.TempDir()
	in := filepath.Join(host, "in")
	if err := os.MkdirAll(filepath.Join(in, "x/y"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "x/y/f"), []byte("deep"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(in, "secret")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(host, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{in, "/tmp"}, {in, "/tmp/renamed"}, {filepath.Join(in, "x/y/f"), "/tmp"}, {filepath.Join(host, "link"), "/tmp/l"}} {
		if err := CopyIn(ctx, h, c[0], c[1]); err != nil {
			t.Fatalf("CopyIn %s %s: %v", c[0], c[1], err)
		}
	}
	if err := CopyInFrom(ctx, h, strings.NewReader("streamed"), "/tmp/s"); err != nil {
		t.Fatal(err)
	}
	got := sh(t, h, `cd /tmp && for f in in/x/y/f renamed/x/y/f f s; do printf '%s %s ' "$(cat $f)" "$(stat -c %a $f)"; done; readlink in/secret l`)
	if want := "deep 640 deep 640 deep 640 streamed 644 /etc/shadow\n/etc/shadow\n"; got != want {
		t.Errorf("inside: %q, want %q", got, want)
	}
	err := CopyIn(ctx, h, filepath.Join(host, "fifo"), "/tmp/p")
	var te *TypeError
	if !errors.As(err, &te) || te.Path != filepath.Join(host, "fifo") || te.TypeName() != "named pipe" {
		t.Errorf("a FIFO: %v, want a TypeError", err)
	}
	if err := CopyIn(ctx, h, in, "/tmp/nodir/"); err == nil || err.Error() != "the destination directory /tmp/nodir/ does not exist in the sandbox" {
		t.Errorf("into a missing directory: %v", err)
	}
	if err := CopyIn(ctx, h, filepath.Join(host, "missing"), "/tmp"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("a missing source: %v, want ErrNotExist", err)
	}
	sh(t, h, "test ! -e /tmp/p && test ! -e /tmp/nodir")
}
