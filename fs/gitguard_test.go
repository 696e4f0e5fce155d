package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestGitControl(t *testing.T) {
	for rel, want := range map[string]bool{
		".git/hooks/pre-commit":                true,
		".git/hooks":                           true,
		".git/config":                          true,
		".git/config.worktree":                 true,
		".git/commondir":                       true,
		"sub/.git/config":                      true,
		".git/modules/lib/config":              true,
		".git/modules/lib/hooks/post-checkout": true,
		".git/modules/a/modules/b/config":      true,
		".git/worktrees/w/commondir":           true,
		".git/config/x":                        false,
		".git/HEAD":                            false,
		".git/index":                           false,
		".git/refs/heads/main":                 false,
		".git/objects/ab/cdef":                 false,
		"config":                               false,
		"hooks/pre-commit":                     false,
		"src/.gitignore":                       false,
		"git/config":                           false,
		".git/modules/config":                  false, // a module named "config"'s directory itself
	} {
		if got := GitControl(rel); got != want {
			t.Errorf("GitControl(%q) = %v, want %v", rel, got, want)
		}
	}
}

// mkGitDir makes a minimal git directory (HEAD, config, hooks) at dir.
func mkGitDir(t *testing.T, dir string, withHooks, withConfig bool) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if withConfig {
		if err := os.WriteFile(filepath.Join(dir, "config"), []byte("[core]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if withHooks {
		if err := os.Mkdir(filepath.Join(dir, "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// FindGitDirs finds repositories at the root and two levels below, their
// submodules, a bare repository at the root; it follows no symlink,
// skips what other mounts shadow, and looks at rw mounts only.
func TestFindGitDirs(t *testing.T) {
	root := t.TempDir()
	mkGitDir(t, filepath.Join(root, ".git"), true, true)
	mkGitDir(t, filepath.Join(root, ".git", "modules", "lib"), true, true)
	mkGitDir(t, filepath.Join(root, "a", "b", ".git"), true, true)
	mkGitDir(t, filepath.Join(root, "a", "c", ".git"), true, true)
	mkGitDir(t, filepath.Join(root, "a", "b", "c", ".git"), true, true) // too deep
	mkGitDir(t, filepath.Join(root, "shadowed", ".git"), true, true)
	other := t.TempDir()
	mkGitDir(t, filepath.Join(other, ".git"), true, true)
	if err := os.Symlink(other, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// Not a git directory: no HEAD.
	if err := os.MkdirAll(filepath.Join(root, "x", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := Mount{Source: root, Target: "/w", Access: ReadWrite}
	got, complete := FindGitDirs(m, []string{"/w/shadowed"})
	if !complete {
		t.Error("a small tree's search is incomplete")
	}
	want := []GitGuard{
		{Dir: filepath.Join(root, ".git"), Target: "/w/.git", Pin: true, Control: true},
		{Dir: filepath.Join(root, ".git/modules/lib"), Target: "/w/.git/modules/lib", Control: true},
		// The directories on the way to a repository below the root are
		// pinned, once each.
		{Dir: filepath.Join(root, "a"), Target: "/w/a", Pin: true},
		{Dir: filepath.Join(root, "a/b"), Target: "/w/a/b", Pin: true},
		{Dir: filepath.Join(root, "a/b/.git"), Target: "/w/a/b/.git", Pin: true, Control: true},
		{Dir: filepath.Join(root, "a/c"), Target: "/w/a/c", Pin: true},
		{Dir: filepath.Join(root, "a/c/.git"), Target: "/w/a/c/.git", Pin: true, Control: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FindGitDirs = %+v\nwant %+v", got, want)
	}
	for _, a := range []Access{ReadOnly, CopyOnWrite} {
		if g, _ := FindGitDirs(Mount{Source: root, Target: "/w", Access: a}, nil); len(g) != 0 {
			t.Errorf("%s mount: %+v, want no guards", a, g)
		}
	}

	bare := t.TempDir()
	mkGitDir(t, bare, true, true)
	got, _ = FindGitDirs(Mount{Source: bare, Target: "/repo.git", Access: ReadWrite}, nil)
	if want := []GitGuard{{Dir: bare, Target: "/repo.git", Control: true}}; !reflect.DeepEqual(got, want) {
		t.Errorf("bare repository: %+v, want %+v", got, want)
	}
}

// The search reads a bounded number of directory entries and returns a
// bounded number of git directories, and says when it stopped.
func TestFindGitDirsIsBounded(t *testing.T) {
	root := t.TempDir()
	for i := range gitSearchEntries + 1 {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, complete := FindGitDirs(Mount{Source: root, Target: "/w", Access: ReadWrite}, nil); complete {
		t.Errorf("%d entries: the search says it is complete", gitSearchEntries+1)
	}

	many := t.TempDir()
	for i := range gitDirsMax + 1 {
		mkGitDir(t, filepath.Join(many, fmt.Sprintf("r%03d", i), ".git"), true, true)
	}
	got, complete := FindGitDirs(Mount{Source: many, Target: "/w", Access: ReadWrite}, nil)
	control := 0
	for _, g := range got {
		if g.Control {
			control++
		}
	}
	if complete || control != gitDirsMax {
		t.Errorf("%d repositories: %d guarded, complete %v; want %d and incomplete", gitDirsMax+1, control, complete, gitDirsMax)
	}
}

// GitGuardMounts pins .git, makes hooks and config read-only, and
// creates them first where missing, owned as the git directory is.
func TestGitGuardMounts(t *testing.T) {
	root := t.TempDir()
	git := filepath.Join(root, ".git")
	mkGitDir(t, git, false, false)
	got, err := GitGuardMounts([]GitGuard{{Dir: git, Target: "/w/.git", Pin: true, Control: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Source: git, Target: "/w/.git", Access: ReadWrite},
		{Source: filepath.Join(git, "hooks"), Target: "/w/.git/hooks", Access: ReadOnly},
		{Source: filepath.Join(git, "config"), Target: "/w/.git/config", Access: ReadOnly},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GitGuardMounts = %+v\nwant %+v", got, want)
	}
	if fi, err := os.Lstat(filepath.Join(git, "hooks")); err != nil || !fi.IsDir() {
		t.Errorf("hooks: %v %v, want a directory created", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(git, "config")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("config: %v %v, want an empty file created", fi, err)
	}

	// A symlinked hooks (planted to point elsewhere) is refused, not
	// followed or replaced.
	git2 := filepath.Join(t.TempDir(), ".git")
	mkGitDir(t, git2, false, true)
	if err := os.Symlink(t.TempDir(), filepath.Join(git2, "hooks")); err != nil {
		t.Fatal(err)
	}
	if _, err := GitGuardMounts([]GitGuard{{Dir: git2, Target: "/w/.git", Pin: true, Control: true}}); err == nil || !strings.Contains(err.Error(), "hooks is not a directory") {
		t.Errorf("a symlinked hooks: %v, want a refusal naming it", err)
	}
}
