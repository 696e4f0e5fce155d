package layer

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ptSecret makes a root-only host file outside both trees and returns its
// path and content.
func ptSecret(t *testing.T) (string, string) {
	t.Helper()
	content := "SECRET-" + filepath.Base(t.TempDir())
	p := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, content
}

// ptWritePatchTimed runs WritePatchOptions with a guard: a call that has
// not returned after a minute (it blocks, say on a FIFO) fails the test.
func ptWritePatchTimed(t *testing.T, lower, upper string, changes []Change, opts PatchOptions) ([]byte, error) {
	t.Helper()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		err := WritePatchOptions(&out, lower, upper, changes, opts)
		done <- result{out.Bytes(), err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(time.Minute):
		t.Fatalf("WritePatch blocked")
		return nil, nil
	}
}

func TestWritePatchSymlinkToHostFileIsALink(t *testing.T) {
	ptNeed(t, "git")
	secret, content := ptSecret(t)
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, lower, map[string]ptEntry{"was-file.txt": ptFile("mine\n")})
	ptWrite(t, upper, map[string]ptEntry{"was-file.txt": ptLink(secret), "new.txt": ptLink(secret)})
	changes := []Change{{Path: "new.txt", Kind: Added}, {Path: "was-file.txt", Kind: Modified}}
	patch := ptWritePatch(t, lower, upper, changes, PatchOptions{})
	if bytes.Contains(patch, []byte(content)) {
		t.Fatalf("the patch holds the secret:\n%s", patch)
	}
	// The links are exported as links, their targets as text.
	ptCompare(t, "git apply", ptRead(t, ptGitApply(t, lower, patch)),
		map[string]ptEntry{"was-file.txt": ptLink(secret), "new.txt": ptLink(secret)})
}

func TestWritePatchRefusesSymlinkedParents(t *testing.T) {
	secret, content := ptSecret(t)
	dir := filepath.Dir(secret)
	for _, c := range []struct {
		name   string
		change Change
		side   string // where the symlinked parent is
	}{
		{"added beneath an upper symlink", Change{Path: "dir/shadow", Kind: Added}, "upper"},
		{"modified beneath an upper symlink", Change{Path: "dir/shadow", Kind: Modified}, "upper"},
		{"deleted beneath a lower symlink", Change{Path: "dir/shadow", Kind: Deleted}, "lower"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lower, upper := t.TempDir(), t.TempDir()
			other := lower
			root := upper
			if c.side == "lower" {
				root, other = lower, upper
			}
			if err := os.Symlink(dir, filepath.Join(root, "dir")); err != nil {
				t.Fatal(err)
			}
			ptWrite(t, other, map[string]ptEntry{"dir/shadow": ptFile("decoy\n")})
			out, err := ptWritePatchTimed(t, lower, upper, []Change{c.change}, PatchOptions{})
			if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) {
				t.Fatalf("err %v, want ELOOP or EXDEV", err)
			}
			prefix := map[string]string{"upper": "b/", "lower": "a/"}[c.side]
			if !strings.Contains(err.Error(), prefix+"dir/shadow") {
				t.Errorf("error %q does not name %sdir/shadow", err, prefix)
			}
			if len(out) != 0 || strings.Contains(err.Error(), content) {
				t.Errorf("output %q (error %q) after a refused path", out, err)
			}
		})
	}
}

func TestWritePatchRefusesSpecialFiles(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, lower, map[string]ptEntry{"was-file": ptFile("x\n"), "a-fine.txt": ptFile("a\n")})
	ptWrite(t, upper, map[string]ptEntry{"a-fine.txt": ptFile("b\n")})
	if err := unix.Mkfifo(filepath.Join(upper, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(upper, "was-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(upper, "p\x1b[2J\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(upper, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	haveDev := unix.Mknod(filepath.Join(upper, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil
	haveWhiteout := unix.Mknod(filepath.Join(upper, "whiteout"), unix.S_IFCHR, 0) == nil

	cases := []struct {
		change Change
		want   string
	}{
		{Change{Path: "pipe", Kind: Added}, "b/pipe is a named pipe"},
		{Change{Path: "was-file", Kind: Modified}, "b/was-file is a named pipe"},
		{Change{Path: "p\x1b[2J\n", Kind: Added}, `"b/p\033[2J\n" is a named pipe`},
		{Change{Path: "sock", Kind: Added}, "b/sock is a socket"},
	}
	if haveDev {
		cases = append(cases, struct {
			change Change
			want   string
		}{Change{Path: "null", Kind: Added}, "b/null is a character device"})
	}
	if haveWhiteout {
		cases = append(cases, struct {
			change Change
			want   string
		}{Change{Path: "whiteout", Kind: Added}, "b/whiteout is a character device"})
	}
	for _, c := range cases {
		// The fine change comes first: the refusal still precedes any output.
		out, err := ptWritePatchTimed(t, lower, upper, []Change{{Path: "a-fine.txt", Kind: Modified}, c.change}, PatchOptions{})
		if !errors.Is(err, ErrNotExportable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want ErrNotExportable with %q", c.change.Path, err, c.want)
		}
		if strings.ContainsAny(err.Error(), "\x1b\n") {
			t.Errorf("error carries control bytes: %q", err)
		}
		if len(out) != 0 {
			t.Errorf("%q: output before the refusal: %q", c.change.Path, out)
		}
	}
}

// A FIFO put in place of a checked file between the check and the read
// makes the read open fail or return at once, never block.
func TestPatchOpenOfAFIFODoesNotBlock(t *testing.T) {
	upper := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(upper, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := openPatchRoot(upper, "b/")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	done := make(chan error, 1)
	go func() {
		fd, err := r.open("pipe", unix.O_RDONLY|unix.O_NONBLOCK)
		if err == nil {
			unix.Close(fd)
		}
		_, err = r.load("pipe", 1<<20, 1<<30)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotExportable) {
			t.Errorf("load of a FIFO: %v, want ErrNotExportable", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("opening a FIFO blocked")
	}
}

func TestWritePatchRefusesBadChanges(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, upper, map[string]ptEntry{"big": ptFile(strings.Repeat("x", 2000))})
	ptWrite(t, lower, map[string]ptEntry{"old-big": ptFile(strings.Repeat("x", 2000))})
	for _, c := range []struct {
		change Change
		want   string
	}{
		{Change{Path: "../escape", Kind: Added}, "invalid change path ../escape"},
		{Change{Path: "/etc/shadow", Kind: Added}, "invalid change path /etc/shadow"},
		{Change{Path: "a//b", Kind: Added}, "invalid change path a//b"},
		{Change{Path: "a/./b", Kind: Added}, "invalid change path a/./b"},
		{Change{Path: "", Kind: Added}, "invalid change path"},
		{Change{Path: "big", Kind: "renamed"}, "unknown change kind renamed"},
		{Change{Path: "big", Kind: Added}, "b/big is 2000 bytes, over the patch limit of 1000"},
	} {
		out, err := ptWritePatchTimed(t, lower, upper, []Change{c.change}, PatchOptions{MaxFileSize: 1000})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.change, err, c.want)
		}
		if len(out) != 0 {
			t.Errorf("%+v: output %q", c.change, out)
		}
	}
	// The old side is only hashed: deleting a file over the limit is fine.
	out, err := ptWritePatchTimed(t, lower, upper, []Change{{Path: "old-big", Kind: Deleted}}, PatchOptions{MaxFileSize: 1000})
	want := "diff --git a/old-big b/old-big\ndeleted file mode 100644\nindex " + blobOID([]byte(strings.Repeat("x", 2000))) + ".." + zeroOID +
		"\nGIT binary patch\nliteral 0\nHcmV?d00001\n\n"
	if err != nil || string(out) != want {
		t.Errorf("deletion over the limit: %v\n%s\nwant\n%s", err, out, want)
	}
}

// An error after output began (here a file gone between the check and
// the read) ends the output with a line that makes git apply refuse the
// whole patch.
func TestWritePatchIncompleteIsRejected(t *testing.T) {
	ptNeed(t, "git")
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, upper, map[string]ptEntry{"a.txt": ptFile("a\n")})
	out, err := ptWritePatchTimed(t, lower, upper, []Change{{Path: "a.txt", Kind: Added}, {Path: "z.txt", Kind: Added}}, PatchOptions{})
	if !errors.Is(err, ErrFileChanged) || !strings.Contains(err.Error(), "b/z.txt disappeared") {
		t.Fatalf("err %v, want ErrFileChanged naming b/z.txt", err)
	}
	if !bytes.HasPrefix(out, []byte("diff --git a/a.txt b/a.txt\n")) || !bytes.HasSuffix(out, []byte("\n@@ -1 +1 @@\n")) {
		t.Fatalf("output:\n%s", out)
	}
	dir := ptCopy(t, lower)
	if msg, err := ptGit(dir, out, "apply", "-"); err == nil {
		t.Fatalf("git apply accepted an incomplete patch: %s", msg)
	}
	if got := ptRead(t, dir); len(got) != 0 {
		t.Errorf("git apply wrote %v", got)
	}
}

// The second read of a streamed file is checked against the first.
func TestPatchLiteralDetectsChange(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	err := writeLiteral(w, strings.NewReader("changed"), 7, blobOID([]byte("checked")), "b/f")
	if !errors.Is(err, ErrFileChanged) {
		t.Errorf("writeLiteral of changed content: %v, want ErrFileChanged", err)
	}
	if _, err := streamOID(strings.NewReader("short"), 10, "b/f"); !errors.Is(err, ErrFileChanged) {
		t.Errorf("streamOID of a shrunk file: %v, want ErrFileChanged", err)
	}
	oid, err := streamOID(strings.NewReader("checked"), 7, "b/f")
	if err != nil || oid != blobOID([]byte("checked")) {
		t.Errorf("streamOID = %s, %v; want %s", oid, err, blobOID([]byte("checked")))
	}
}
