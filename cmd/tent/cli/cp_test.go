package cli

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
)

// The tree helpers the transfer and CLI tests share.
var (
	hostTree = sandboxtest.HostTree
	sameTree = sandboxtest.SameTree
)

// A copy out that fails leaves the destination as it was, byte for byte,
// and no temporary file beside it; it exits 125 (it truncated the file
// and exited 1).
func TestCpFailureLeavesTheDestination(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	host := t.TempDir()
	keep := filepath.Join(host, "keep.txt")
	if err := os.WriteFile(keep, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := l.create(t)
	l.tent(t, "exec", id, "--", "sh", "-c", "printf 0123456789 > /tmp/ten; mkfifo /tmp/fifo").expect(t, 0)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{id + ":/typo.txt", keep}, "tent: stat /typo.txt: no such file or directory\n"},
		{[]string{"--max-size", "4", id + ":/tmp/ten", keep}, "tent: /tmp/ten is larger than 4 bytes (see --max-size)\n"},
		{[]string{id + ":/tmp/fifo", keep}, "tent: /tmp/fifo is a named pipe: tent cp copies regular files, directories and symlinks\n"},
		{[]string{id + ":/tmp", keep}, "tent: cannot copy a directory over " + keep + ", which is not a directory\n"},
		{[]string{id + ":/tmp/ten", filepath.Join(host, "nodir") + "/"}, "tent: the destination directory " + filepath.Join(host, "nodir") + "/ does not exist\n"},
	} {
		r := l.tent(t, append([]string{"cp"}, tc.args...)...)
		r.expect(t, 125)
		if r.stderr != tc.stderr {
			t.Errorf("cp %q: stderr %q, want %q", tc.args, r.stderr, tc.stderr)
		}
		sameTree(t, "after cp "+strings.Join(tc.args, " "), hostTree(t, host), map[string]string{"keep.txt": "f -rw------- precious\n"})
	}
	// A successful copy replaces the file whole, with the source's mode.
	l.tent(t, "cp", id+":/tmp/ten", keep).expect(t, 0)
	sameTree(t, "after a good cp", hostTree(t, host), map[string]string{"keep.txt": "f -rw-r--r-- 0123456789"})
}

// Directories copy recursively both ways, as docker cp: into a new name,
// or into an existing directory as DIR/NAME. Symlinks are copied as
// links, FIFOs are skipped, permission bits kept, set-id bits never; an
// existing directory is not merged into.
func TestCpDirectories(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	host := t.TempDir()
	id := l.create(t)
	l.tent(t, "exec", id, "--", "sh", "-c", `set -e; mkdir -p /tmp/d/sub /tmp/d/empty; printf a > /tmp/d/a; printf 'b b' > "/tmp/d/sub/b c"
		chmod 750 /tmp/d/sub; chmod 700 /tmp/d/a; ln -s /etc/passwd /tmp/d/abs; ln -s ../a /tmp/d/sub/rel; mkfifo /tmp/d/fifo; printf x > /tmp/file`).expect(t, 0)
	want := map[string]string{
		"a": "f -rwx------ a", "sub": "d -rwxr-x---", "sub/b c": "f -rw-r--r-- b b", "sub/rel": "l ../a",
		"abs": "l /etc/passwd", "empty": "d -rwxr-xr-x",
	}
	out := filepath.Join(host, "out")
	l.tent(t, "cp", id+":/tmp/d", out).expect(t, 0)
	sameTree(t, "cp ID:/tmp/d out", hostTree(t, out), want)
	// out exists now: the second copy lands in out/d.
	l.tent(t, "cp", id+":/tmp/d", out).expect(t, 0)
	want2 := map[string]string{"d": "d -rwxr-xr-x"}
	for k, v := range want {
		want2[k] = v
		want2["d/"+k] = v
	}
	sameTree(t, "cp ID:/tmp/d out (existing)", hostTree(t, out), want2)
	// out/d exists: no merge, nothing changed.
	r := l.tent(t, "cp", id+":/tmp/d", out)
	r.expect(t, 125)
	if w := "tent: " + filepath.Join(out, "d") + " exists: tent cp does not merge directories (remove it, or copy into another directory)\n"; r.stderr != w {
		t.Errorf("third cp: stderr %q, want %q", r.stderr, w)
	}
	sameTree(t, "after the refused merge", hostTree(t, out), want2)
	// A file into an existing directory; a symlink as a link.
	l.tent(t, "cp", id+":/tmp/file", host).expect(t, 0)
	l.tent(t, "cp", id+":/tmp/d/abs", filepath.Join(host, "abs")).expect(t, 0)
	if b, _ := os.ReadFile(filepath.Join(host, "file")); string(b) != "x" {
		t.Errorf("cp of a file into a directory: %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(host, "abs")); l != "/etc/passwd" {
		t.Errorf("cp of a symlink: %q, want a link to /etc/passwd", l)
	}
	// -L follows it.
	l.tent(t, "cp", "-L", id+":/tmp/d/sub/rel", filepath.Join(host, "followed")).expect(t, 0)
	if b, _ := os.ReadFile(filepath.Join(host, "followed")); string(b) != "a" {
		t.Errorf("cp -L: %q", b)
	}

	// Into the sandbox: the host tree, as is, into an existing directory.
	in := filepath.Join(host, "in")
	for _, d := range []string{"in/x/y"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(in, "x/y/f"), []byte("deep"), 0o640)
	os.Symlink("/etc/shadow", filepath.Join(in, "secret"))
	l.tent(t, "cp", in, id+":/tmp").expect(t, 0)
	r = l.tent(t, "exec", id, "--", "sh", "-c", "cd /tmp/in && cat x/y/f; echo; stat -c '%a %F' x/y/f; readlink secret")
	if w := "deep\n640 regular file\n/etc/shadow\n"; r.stdout != w {
		t.Errorf("cp of a directory in: %q, want %q (%s)", r.stdout, w, r.stderr)
	}
	// A directory to a new name inside.
	l.tent(t, "cp", in, id+":/tmp/renamed").expect(t, 0)
	l.tent(t, "exec", id, "--", "test", "-f", "/tmp/renamed/x/y/f").expect(t, 0)
	// To stdout, a directory is a tar archive.
	r = l.tent(t, "cp", id+":/tmp/d/sub", "-")
	r.expect(t, 0)
	var names []string
	tr := tar.NewReader(strings.NewReader(r.stdout))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "b c,rel" {
		t.Errorf("cp of a directory to -: entries %q", got)
	}
}
