package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCp(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	host := t.TempDir()
	os.Chmod(host, 0o777)
	id := l.create(t)
	src := filepath.Join(host, "in.txt")
	if err := os.WriteFile(src, []byte("to the sandbox\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "cp", src, id+":/tmp/in.txt").expect(t, 0)
	if r := l.tent(t, "exec", id, "--", "sh", "-c", "cat /tmp/in.txt; stat -c %a /tmp/in.txt"); r.stdout != "to the sandbox\n640\n" {
		t.Errorf("inside after cp in: %q", r.stdout)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "echo from the sandbox > /tmp/out.txt").expect(t, 0)
	dst := filepath.Join(host, "out.txt")
	l.tent(t, "cp", id+":/tmp/out.txt", dst).expect(t, 0)
	if b, _ := os.ReadFile(dst); string(b) != "from the sandbox\n" {
		t.Errorf("host after cp out: %q", b)
	}
	if r := l.tent(t, "cp", id+":/tmp/out.txt", "-"); r.stdout != "from the sandbox\n" {
		t.Errorf("cp to stdout: %q", r.stdout)
	}
	l.tent(t, "cp", id+":/etc/shadow", "-").expect(t, 125, "tent: read /etc/shadow: permission denied")
	l.tent(t, "cp", id+":/nope", dst).expect(t, 125, "tent: stat /nope: no such file or directory")
	l.tent(t, "cp", src, src).expect(t, 125, "ID:PATH")
}

func TestDiffAndExportVerbs(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755) // reachable by a root caller's sandbox user
	for p, c := range map[string]string{"a.txt": "alpha\n", "b.txt": "beta\n"} {
		os.WriteFile(filepath.Join(src, p), []byte(c), 0o666)
		os.Chmod(filepath.Join(src, p), 0o666)
	}
	r0 := l.tent(t, "create", "--cow", src+":/work")
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	l.tent(t, "exec", id, "--", "sh", "-c", "cd /work && echo ALPHA > a.txt && rm b.txt && echo new > c.txt").expect(t, 0)
	if b, _ := os.ReadFile(filepath.Join(src, "a.txt")); string(b) != "alpha\n" {
		t.Fatalf("the host directory changed: %q", b)
	}
	if r := l.tent(t, "diff", id); r.stdout != "M /work/a.txt\nD /work/b.txt\nA /work/c.txt\n" {
		t.Errorf("tent diff: %q", r.stdout)
	}
	r := l.tent(t, "export", id, "--patch")
	r.expect(t, 0)
	copyDir := t.TempDir()
	for _, p := range []string{"a.txt", "b.txt"} {
		b, _ := os.ReadFile(filepath.Join(src, p))
		os.WriteFile(filepath.Join(copyDir, p), b, 0o644)
	}
	patch := exec.Command("patch", "-p1", "--batch", "--remove-empty-files")
	patch.Dir, patch.Stdin = copyDir, strings.NewReader(r.stdout)
	if out, err := patch.CombinedOutput(); err != nil {
		t.Fatalf("patch -p1 of tent export --patch: %v\n%s\n%s", err, out, r.stdout)
	}
	if got := tree(t, copyDir); len(got) != 2 || got["a.txt"] != "ALPHA\n" || got["c.txt"] != "new\n" {
		t.Errorf("patched copy: %v", got)
	}
	toDir := t.TempDir()
	l.tent(t, "export", id, "--to", toDir).expect(t, 0)
	if got := tree(t, toDir); got["a.txt"] != "ALPHA\n" || got["c.txt"] != "new\n" {
		t.Errorf("export --to: %v", got)
	}
	l.tent(t, "export", id).expect(t, 125, "--patch")
	other := l.create(t)
	l.tent(t, "diff", other).expect(t, 125, "no cow mount")
}

func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(root, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}
