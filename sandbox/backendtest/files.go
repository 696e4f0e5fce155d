package backendtest

import (
	"bytes"
	"context"
	"errors"

	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// The file verbs: what each answers, typed, on every backend, and the
// errno a failure carries (an *os.PathError).

// wantErrno fails the test unless err is an *os.PathError carrying errno.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	var pe *os.PathError
	if !errors.As(err, &pe) || !errors.Is(err, errno) {
		t.Errorf("%s: %v; want an *os.PathError carrying %s", what, err, errno.Error())
	}
}

// The files API writes, reads, stats and removes inside the sandbox; a
// missing path is an *os.PathError matching fs.ErrNotExist.
func files(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	fi, err := h.WriteFile(ctx, "/tmp/f", strings.NewReader("content"), sandbox.WriteOptions{Mode: 0o640})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if fi.Path != "/tmp/f" || fi.Name != "f" || fi.Size != 7 || fi.Mode != 0o640 {
		t.Errorf("write answered %+v; want /tmp/f, 7 bytes, mode 640", fi)
	}
	if got := out(t, b, s.ID, "sh", "-c", "cat /tmp/f; stat -c ' %a' /tmp/f"); got != "content 640" {
		t.Errorf("the command sees %q", got)
	}
	var read bytes.Buffer
	if err := h.ReadFile(ctx, "/tmp/f", &read, sandbox.ReadOptions{}); err != nil || read.String() != "content" {
		t.Errorf("read: %q, %v", read.String(), err)
	}
	var missing *os.PathError
	if err := h.ReadFile(ctx, "/tmp/missing", &read, sandbox.ReadOptions{}); !errors.As(err, &missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read of a missing file: %v, want a *PathError matching ErrNotExist", err)
	}
	if err := h.Remove(ctx, "/tmp/f", false); err != nil {
		t.Errorf("remove: %v", err)
	}
	if got := out(t, b, s.ID, "sh", "-c", "test -e /tmp/f && echo there || echo gone"); got != "gone" {
		t.Errorf("after remove: %q", got)
	}
}

// failingReader yields n bytes, then fails with errReaderFailed.
type failingReader struct{ n int }

var errReaderFailed = errors.New("the reader failed")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errReaderFailed
	}
	p = p[:min(len(p), r.n)]
	clear(p)
	r.n -= len(p)
	return len(p), nil
}

// A write (plain, or with Parents) whose reader fails after 1 MiB
// returns the reader's error and leaves the file it was to replace as it
// was, content and mode; the next write leaves no temporary beside it
// (issue 36: the helper took its input's end for the file's and put the
// first MiB in place of the file).
func fileInputFails(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	out(t, b, s.ID, "sh", "-c", "mkdir /tmp/d && printf 'old content' > /tmp/d/f && chmod 640 /tmp/d/f")
	for op, opts := range map[string]sandbox.WriteOptions{"write": {Mode: 0o600}, "put": {Mode: 0o600, Parents: true}} {
		_, err := h.WriteFile(ctx, "/tmp/d/f", &failingReader{n: 1 << 20}, opts)
		var pe *os.PathError
		if !errors.Is(err, errReaderFailed) || !errors.As(err, &pe) || pe.Op != op || pe.Path != "/tmp/d/f" {
			t.Errorf("%s with a reader that fails: %v; want an *os.PathError (%s /tmp/d/f) wrapping the reader's error", op, err, op)
		}
		if got := out(t, b, s.ID, "sh", "-c", "cat /tmp/d/f; stat -c ' %a' /tmp/d/f"); got != "old content 640" {
			t.Errorf("after a %s whose reader failed, the file holds %.40q; want the old content, mode 640", op, got)
		}
	}
	// A reader that fails at once: the same, and a new file is not made.
	if _, err := h.WriteFile(ctx, "/tmp/d/new", &failingReader{}, sandbox.WriteOptions{}); !errors.Is(err, errReaderFailed) {
		t.Errorf("a new file whose reader fails at once: %v; want the reader's error", err)
	}
	if _, err := h.WriteFile(ctx, "/tmp/d/g", strings.NewReader("g"), sandbox.WriteOptions{}); err != nil {
		t.Fatalf("the next write: %v", err)
	}
	if got := out(t, b, s.ID, "sh", "-c", "ls -A /tmp/d | tr '\\n' ' '"); got != "f g" {
		t.Errorf("/tmp/d holds %q; want f g (no temporary, no new file)", got)
	}
}

// Each verb answers typed: FileInfos with type, mode, size, mtime,
// owner and metadata; listings in order and to a depth; and the errno
// of what the sandbox refuses.
func fileVerbs(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	before := time.Now().Add(-time.Minute)
	d, err := h.Mkdir(ctx, "/tmp/v/sub")
	if err != nil || !d.IsDir || d.Path != "/tmp/v/sub" || !d.Mode.IsDir() {
		t.Fatalf("Mkdir: %+v, %v", d, err)
	}
	_, err = h.Mkdir(ctx, "/tmp/v/sub")
	wantErrno(t, "Mkdir of a directory that is there", err, syscall.EEXIST)
	// Metadata are user xattrs, which tmpfs (the sandbox's /tmp) has
	// only from Linux 6.6: before, the write says so (EOPNOTSUPP), and
	// the metadata checks are left out.
	wantMeta := map[string]string{"k": "v"}
	fi, err := h.WriteFile(ctx, "/tmp/v/sub/a.txt", strings.NewReader("hello"), sandbox.WriteOptions{Parents: true, Metadata: wantMeta})
	if errors.Is(err, syscall.EOPNOTSUPP) {
		t.Logf("no user xattrs on the sandbox's /tmp (%v): metadata not checked", err)
		wantMeta = nil
		fi, err = h.WriteFile(ctx, "/tmp/v/sub/a.txt", strings.NewReader("hello"), sandbox.WriteOptions{Parents: true})
	}
	if err != nil || fi.Size != 5 || fi.Metadata["k"] != wantMeta["k"] || fi.ModTime.Before(before) {
		t.Fatalf("WriteFile with Parents: %+v, %v", fi, err)
	}
	_, err = h.Mkdir(ctx, "/tmp/v/sub/a.txt")
	wantErrno(t, "Mkdir over a file", err, syscall.ENOTDIR)
	_, err = h.WriteFile(ctx, "/tmp/v/none/b", strings.NewReader("b"), sandbox.WriteOptions{})
	wantErrno(t, "WriteFile into a missing directory", err, syscall.ENOENT)
	_, err = h.WriteFile(ctx, "/tmp/v/b", strings.NewReader("b"), sandbox.WriteOptions{Metadata: map[string]string{"k": "v"}})
	wantErrno(t, "WriteFile with metadata and no Parents", err, syscall.EINVAL)
	st, err := h.Stat(ctx, "/tmp/v/sub/a.txt")
	if err != nil || st.Name != "a.txt" || st.Size != 5 || st.Mode != 0o644 || st.IsDir || st.Metadata["k"] != wantMeta["k"] || !st.ModTime.Equal(fi.ModTime) {
		t.Errorf("Stat: %+v, %v; want what WriteFile answered (%+v)", st, err, fi)
	}
	// A write without Parents keeps the file's metadata.
	if fi, err := h.WriteFile(ctx, "/tmp/v/sub/a.txt", strings.NewReader("hello!"), sandbox.WriteOptions{}); err != nil || fi.Size != 6 || fi.Metadata["k"] != wantMeta["k"] {
		t.Errorf("WriteFile over it: %+v, %v; want 6 bytes, the metadata kept", fi, err)
	}
	ls, err := h.ReadDir(ctx, "/tmp/v", 0)
	if err != nil || len(ls) != 1 || ls[0].Name != "sub" || !ls[0].IsDir {
		t.Errorf("ReadDir depth 0: %+v, %v; want sub alone", ls, err)
	}
	ls, err = h.ReadDir(ctx, "/tmp/v", 2)
	if err != nil || len(ls) != 2 || ls[1].Path != "/tmp/v/sub/a.txt" {
		t.Errorf("ReadDir depth 2: %+v, %v; want sub, then sub/a.txt", ls, err)
	}
	_, err = h.ReadDir(ctx, "/tmp/v/sub/a.txt", 1)
	wantErrno(t, "ReadDir of a file", err, syscall.ENOTDIR)
	mv, err := h.Rename(ctx, "/tmp/v/sub/a.txt", "/tmp/v/new/dir/c.txt")
	if err != nil || mv.Path != "/tmp/v/new/dir/c.txt" || mv.Size != 6 {
		t.Errorf("Rename: %+v, %v; want the FileInfo of the destination", mv, err)
	}
	_, err = h.Rename(ctx, "/tmp/v/sub/a.txt", "/tmp/v/x")
	wantErrno(t, "Rename of what is gone", err, syscall.ENOENT)
	_, err = h.Stat(ctx, "/tmp/v/sub/a.txt")
	wantErrno(t, "Stat after Rename", err, syscall.ENOENT)
	wantErrno(t, "Remove of a directory that is not empty", h.Remove(ctx, "/tmp/v/new", false), syscall.ENOTEMPTY)
	if err := h.Remove(ctx, "/tmp/v", true); err != nil {
		t.Errorf("Remove all: %v", err)
	}
	wantErrno(t, "Remove of what is gone", h.Remove(ctx, "/tmp/v", true), syscall.ENOENT)
	_, err = h.WriteFile(ctx, "/usr/bin/evil", strings.NewReader(""), sandbox.WriteOptions{})
	wantErrno(t, "WriteFile into the read-only system", err, syscall.EROFS)
}

// A symlink planted inside the sandbox, to the host's /etc/shadow or to
// a host path the sandbox does not see, takes no verb out of the
// sandbox: Stat, Rename and Remove act on the link itself; ReadFile and
// WriteFile follow it as the sandbox would, inside its own view and
// rights, and fail as the sandbox's own open fails.
func fileSymlinks(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	shadow, err := os.Stat("/etc/shadow")
	if err != nil {
		t.Skipf("no /etc/shadow on this host: %v", err)
	}
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	out(t, b, s.ID, "sh", "-c", "ln -s /etc/shadow /tmp/shadow && ln -s "+secret+" /tmp/outside")
	st, err := h.Stat(ctx, "/tmp/shadow")
	if err != nil || st.Mode&os.ModeSymlink == 0 || st.Link != "/etc/shadow" || st.Size != int64(len("/etc/shadow")) {
		t.Errorf("Stat of the link: %+v, %v; want the link itself (to /etc/shadow)", st, err)
	}
	var got bytes.Buffer
	wantErrno(t, "ReadFile through a link to /etc/shadow", h.ReadFile(ctx, "/tmp/shadow", &got, sandbox.ReadOptions{}), syscall.EACCES)
	wantErrno(t, "ReadFile through a link to a host path", h.ReadFile(ctx, "/tmp/outside", &got, sandbox.ReadOptions{}), syscall.ENOENT)
	if got.Len() != 0 {
		t.Errorf("ReadFile through the links wrote %q", got.String())
	}
	_, err = h.WriteFile(ctx, "/tmp/shadow", strings.NewReader("root::0:0::/:/bin/sh\n"), sandbox.WriteOptions{})
	wantErrno(t, "WriteFile through a link to /etc/shadow", err, syscall.EACCES)
	_, err = h.WriteFile(ctx, "/tmp/outside", strings.NewReader("overwritten"), sandbox.WriteOptions{})
	wantErrno(t, "WriteFile through a link to a host path", err, syscall.ENOENT)
	mv, err := h.Rename(ctx, "/tmp/shadow", "/tmp/moved")
	if err != nil || mv.Mode&os.ModeSymlink == 0 || mv.Link != "/etc/shadow" {
		t.Errorf("Rename of the link: %+v, %v; want the link moved", mv, err)
	}
	if err := h.Remove(ctx, "/tmp/moved", false); err != nil {
		t.Errorf("Remove of the link: %v", err)
	}
	if err := h.Remove(ctx, "/tmp/outside", true); err != nil {
		t.Errorf("Remove all of the link: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret" {
		t.Errorf("the host file now holds %q, %v", b, err)
	}
	if now, err := os.Stat("/etc/shadow"); err != nil || !now.ModTime().Equal(shadow.ModTime()) || now.Size() != shadow.Size() {
		t.Errorf("the host's /etc/shadow changed: %v, %v", now, err)
	}
	if got := out(t, b, s.ID, "sh", "-c", "ls -A /tmp | tr '\\n' ' '"); got != "" {
		t.Errorf("left in /tmp: %q; want nothing", got)
	}
}

// What the sandbox can plant to hang or flood the caller is bounded: a
// FIFO or a device is refused, EINVAL (ENXIO for a write: there is no
// reader), without waiting for a peer; a
// huge sparse file is refused before a byte of it moves when it is over
// the read's Limit, its size is told before its content, and a writer
// that fails ends the read.
func fileHostile(t *testing.T, b sandbox.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard, not a measure
	defer cancel()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	out(t, b, s.ID, "sh", "-c", "mkfifo /tmp/fifo && truncate -s 1099511627776 /tmp/sparse")
	var got bytes.Buffer
	wantErrno(t, "ReadFile of a FIFO", h.ReadFile(ctx, "/tmp/fifo", &got, sandbox.ReadOptions{}), syscall.EINVAL)
	wantErrno(t, "ReadFile of /dev/zero", h.ReadFile(ctx, "/dev/zero", &got, sandbox.ReadOptions{}), syscall.EINVAL)
	_, err := h.WriteFile(ctx, "/tmp/fifo", strings.NewReader("x"), sandbox.WriteOptions{})
	wantErrno(t, "WriteFile to a FIFO with no reader", err, syscall.ENXIO) // O_NONBLOCK: no wait for a reader
	wantErrno(t, "ReadFile of a directory", h.ReadFile(ctx, "/tmp", &got, sandbox.ReadOptions{}), syscall.EISDIR)
	wantErrno(t, "ReadFile of a 1 TiB sparse file over a 1 MiB Limit", h.ReadFile(ctx, "/tmp/sparse", &got, sandbox.ReadOptions{Limit: 1 << 20}), syscall.EFBIG)
	var size int64
	errTooBig := errors.New("too big for me")
	err = h.ReadFile(ctx, "/tmp/sparse", &got, sandbox.ReadOptions{Size: func(n int64) error { size = n; return errTooBig }})
	if !errors.Is(err, errTooBig) || size != 1<<40 {
		t.Errorf("ReadFile whose Size refuses: %v, size %d; want the Size's error, and 1 TiB", err, size)
	}
	if got.Len() != 0 {
		t.Errorf("the refused reads wrote %d bytes", got.Len())
	}
	lw := &limitedWriter{max: 1 << 20}
	if err := h.ReadFile(ctx, "/tmp/sparse", lw, sandbox.ReadOptions{}); !errors.Is(err, errWriterFull) || lw.n != 1<<20 {
		t.Errorf("ReadFile into a writer that fails after 1 MiB: %v, %d bytes; want the writer's error", err, lw.n)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the hostile reads did not end: %v", err)
	}
}

// limitedWriter takes max bytes, then fails with errWriterFull.
type limitedWriter struct{ n, max int }

var errWriterFull = errors.New("the writer is full")

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.max {
		w.n = w.max
		return 0, errWriterFull
	}
	w.n += len(p)
	return len(p), nil
}

// Watch reports the changes made once it returned, typed, until its ctx
// ends (then the channel is closed); the watched directory's removal
// ends it too; a missing directory is ENOENT.
func fileWatch(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	_, err := h.Watch(ctx, "/tmp/none", sandbox.WatchOptions{})
	wantErrno(t, "Watch of a missing directory", err, syscall.ENOENT)
	out(t, b, s.ID, "mkdir", "-p", "/tmp/w/sub")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := h.Watch(wctx, "/tmp/w", sandbox.WatchOptions{Recursive: true, Entries: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteFile(ctx, "/tmp/w/sub/f", strings.NewReader("x"), sandbox.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.Err != nil {
			t.Fatalf("the watch failed: %v", ev.Err)
		}
		if ev.Name == "sub/f" && ev.Op == "create" {
			if ev.Info == nil || ev.Info.Path != "/tmp/w/sub/f" {
				t.Errorf("the create event's entry: %+v", ev.Info)
			}
			break
		}
	}
	cancel()
	for range events { // closed once the helper is gone
	}
	// The directory's removal ends a watch.
	events, err = h.Watch(ctx, "/tmp/w", sandbox.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(ctx, "/tmp/w", true); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.Err != nil {
			t.Errorf("the watch of a removed directory failed: %v", ev.Err)
		}
	}

}
