package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tent run --rw of a repository keeps its hooks and config read-only
// inside (EROFS), --rw-git and a policy's rw_git let the sandbox write
// them, and tent diff and export --to flag a cow layer's changes to
// them.
func TestCLIGitControlFiles(t *testing.T) {
	t.Parallel()
	repo := gitRepoDir(t)
	// A failed redirection's status is the shell's own (dash 2, busybox 1).
	plant := "for f in .git/hooks/pre-commit .git/config file; do if echo x >> /w/$f; then echo $f ok; else echo $f failed; fi; done"
	r := tent(t, "run", "--rw", repo+":/w", "--", "sh", "-c", plant)
	r.expect(t, 0, "/w/.git/hooks/pre-commit: Read-only file system", "/w/.git/config: Read-only file system")
	if r.stdout != ".git/hooks/pre-commit failed\n.git/config failed\nfile ok\n" {
		t.Errorf("guarded: stdout %q", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(repo, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a hook reached the host")
	}

	tent(t, "run", "--rw-git", "--rw", repo+":/w", "--", "sh", "-c", plant).expect(t, 0)
	policy := writeFile(t, filepath.Join(t.TempDir(), "p.yaml"), "rw: [\""+repo+":/w\"]\nrw_git: true\n")
	r = tent(t, "run", "--policy", policy, "--", "sh", "-c", plant)
	if r.code != 0 || r.stdout != ".git/hooks/pre-commit ok\n.git/config ok\nfile ok\n" {
		t.Errorf("rw_git: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(repo, ".git", "hooks", "pre-commit")); err != nil || string(b) != "x\nx\n" {
		t.Errorf("--rw-git: host hook %q, %v", b, err)
	}

	l := newLife(t)
	src := gitRepoDir(t)
	id := l.create(t, "--cow", src+":/w")
	l.tent(t, "exec", id, "--", "sh", "-c", "echo evil > /w/.git/hooks/post-checkout && echo '[core]' >> /w/.git/config && echo ok > /w/file").expect(t, 0)
	warn := "the sandbox changed git hooks or config"
	d := l.tent(t, "diff", id)
	d.expect(t, 0, warn, "A /w/.git/hooks/post-checkout", "M /w/.git/config")
	if strings.Contains(d.stderr, "/w/file") {
		t.Errorf("diff warns about an ordinary file: %q", d.stderr)
	}
	var views []changeView
	if err := json.Unmarshal([]byte(l.tent(t, "diff", "-o", "json", id).stdout), &views); err != nil {
		t.Fatal(err)
	}
	flagged := map[string]bool{}
	for _, v := range views {
		flagged[v.Path] = v.GitControl
	}
	if !flagged["/w/.git/hooks/post-checkout"] || !flagged["/w/.git/config"] || flagged["/w/file"] {
		t.Errorf("diff -o json git_control: %v", flagged)
	}
	l.tent(t, "export", id, "--to", t.TempDir()).expect(t, 0, warn, "A /w/.git/hooks/post-checkout")
	if p := l.tent(t, "export", id, "--patch"); strings.Contains(p.stderr, warn) || p.code != 0 {
		t.Errorf("export --patch (which leaves .git out): exit %d, stderr %q", p.code, p.stderr)
	}
}
