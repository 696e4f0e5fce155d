package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A real sandbox replaces a directory of its cow mount with a symlink
// to a host directory (`rm -rf /work/venv && ln -s VICTIM /work/venv`),
// and adds a FIFO and a 1 GiB sparse file. tent diff, tent export --to,
// tent snapshot and tent fork then must finish, never delete or change
// the victim, export the link as a link, the FIFO as a FIFO and the
// sparse file at its size without its disk cost; the fork has the link
// and the sparse file, not the FIFO.
func TestExportOfHostileCowChanges(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755)
	victim := filepath.Join(t.TempDir(), "victim")
	content := []byte("victim's own file\n")
	for _, d := range []string{"venv/bin", "venv/lib"} {
		os.MkdirAll(filepath.Join(src, d), 0o777)
		os.WriteFile(filepath.Join(src, d, "f"), []byte("venv\n"), 0o666)
		os.MkdirAll(filepath.Join(victim, filepath.Base(d)), 0o755)
		if err := os.WriteFile(filepath.Join(victim, filepath.Base(d), "f"), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r0 := l.tent(t, "create", "--cow", src+":/work")
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	l.tent(t, "exec", id, "--", "sh", "-c",
		"cd /work && rm -rf venv && ln -s "+victim+" venv && mkfifo p && truncate -s 1G big && printf tail >> big").expect(t, 0)

	d := l.tent(t, "diff", id)
	d.expect(t, 0)
	for _, line := range []string{"D /work/venv/bin/f", "A /work/venv", "A /work/p", "A /work/big"} {
		if !strings.Contains(d.stdout, line+"\n") {
			t.Errorf("tent diff lacks %q: %q", line, d.stdout)
		}
	}
	dst := t.TempDir()
	for _, d := range []string{"venv/bin", "venv/lib"} {
		os.MkdirAll(filepath.Join(dst, d), 0o755)
		os.WriteFile(filepath.Join(dst, d, "f"), []byte("venv\n"), 0o644)
	}
	l.tent(t, "export", id, "--to", dst).expect(t, 0)
	for _, d := range []string{"bin", "lib"} {
		if b, err := os.ReadFile(filepath.Join(victim, d, "f")); err != nil || !bytes.Equal(b, content) {
			t.Errorf("victim %s/f after export: %q, %v", d, b, err)
		}
	}
	if ln, err := os.Readlink(filepath.Join(dst, "venv")); err != nil || ln != victim {
		t.Errorf("exported venv: %q, %v; want the link", ln, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "p")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("exported p: %v, %v; want a FIFO", fi, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "big"), &st); err != nil || st.Size != 1<<30+4 || st.Blocks*512 > 1<<20 {
		t.Errorf("exported big: size %d, %d bytes on disk (%v); want %d and at most 1 MiB", st.Size, st.Blocks*512, err, 1<<30+4)
	}

	r := l.tent(t, "snapshot", id)
	r.expect(t, 0)
	snap := strings.TrimSpace(r.stdout)
	fr := l.tent(t, "fork", snap, "--name", "forked")
	fr.expect(t, 0)
	out := l.tent(t, "exec", "forked", "--", "sh", "-c", "readlink /work/venv; stat -c %s /work/big; test -e /work/p || echo no-fifo")
	// Snapshots leave FIFOs out (only directories, regular files,
	// symlinks and whiteouts are archived).
	if out.stdout != victim+"\n"+"1073741828\nno-fifo\n" {
		t.Errorf("the fork's /work: %q (%s)", out.stdout, out.stderr)
	}
	for _, d := range []string{"bin", "lib"} {
		if b, err := os.ReadFile(filepath.Join(victim, d, "f")); err != nil || !bytes.Equal(b, content) {
			t.Errorf("victim %s/f after snapshot and fork: %q, %v", d, b, err)
		}
	}
}
