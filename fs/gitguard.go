package fs

import (
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Git repositories in a read-write mount are the one place where a
// sandbox's writes become code the host user runs without asking: git
// runs .git/hooks/* on commit, checkout or merge, and .git/config names
// programs (core.fsmonitor, core.sshCommand, core.pager, diff and merge
// drivers, credential helpers, aliases) that the host's next `git
// status` or `git log` runs. [GitGuards] plans the mounts that keep
// those read-only inside while the rest of the repository stays
// writable, so commits, branches, fetches and stashes still work.

const (
	// gitSearchDepth is how deep below a rw mount's root FindGitDirs
	// looks for repositories: the root itself and two levels of
	// directories (a workspace of projects, a project's vendored
	// checkouts).
	gitSearchDepth = 2
	// gitSearchEntries bounds the directory entries FindGitDirs reads
	// per mount, so a huge tree costs a bounded part of a start.
	gitSearchEntries = 4096
	// gitDirsMax bounds the git directories guarded per mount (three
	// mounts each), submodules included.
	gitDirsMax = 128
)

// GitGuard is one directory that [GitGuardMounts] protects: a git
// directory whose control files it makes read-only, a directory it pins
// (binds onto itself, so that it cannot be renamed away and replaced by
// one the sandbox wrote: renaming a mount point is EBUSY), or both.
type GitGuard struct {
	// Dir is the directory's host path.
	Dir string
	// Target is where Dir lies inside the sandbox.
	Target string
	// Pin binds Dir onto itself (read-write): a repository's .git, and
	// each directory between the mount's root and a repository below it.
	Pin bool
	// Control makes Dir's hooks and config read-only: Dir is a git
	// directory (a repository's .git, a submodule's .git/modules/NAME, a
	// bare repository).
	Control bool
}

// FindGitDirs lists the git directories of a rw mount: a .git directory
// (holding HEAD) at its root or up to two directory levels below, the
// root itself when it is a bare repository, and the submodule git
// directories beneath each .git/modules; and, for a repository below the
// root, the directories on the way to pin. It never follows a symlink, and
// skips what lies beneath skip (the targets of other mounts that shadow
// parts of this one). It reads at most 4096 directory entries and
// returns at most 128 git directories; complete is false when it stopped
// at either bound (what it had not reached is not guarded).
func FindGitDirs(m Mount, skip []string) (guards []GitGuard, complete bool) {
	if m.Access != ReadWrite {
		return nil, true
	}
	f := gitFinder{skip: skip, budget: gitSearchEntries, complete: true, pinned: map[string]bool{}}
	if isBareRepo(m.Source) {
		f.add(m.Source, m.Target, false)
	} else {
		f.search(m.Source, m.Target, 0, nil)
	}
	return f.guards, f.complete
}

// gitFinder is one FindGitDirs search.
type gitFinder struct {
	skip     []string
	budget   int
	guards   []GitGuard
	complete bool
	pinned   map[string]bool // targets of the directories pinned so far
	repos    int             // git directories guarded
}

func (f *gitFinder) shadowed(target string) bool {
	for _, s := range f.skip {
		if target == s || strings.HasPrefix(target, strings.TrimSuffix(s, "/")+"/") {
			return true
		}
	}
	return false
}

// add records a git directory and its submodules' (.git/modules/NAME,
// nested).
func (f *gitFinder) add(dir, target string, pin bool) {
	if f.shadowed(target) {
		return
	}
	if f.repos == gitDirsMax {
		f.complete = false
		return
	}
	f.repos++
	f.guards = append(f.guards, GitGuard{Dir: dir, Target: target, Pin: pin, Control: true})
	for _, e := range f.readDir(filepath.Join(dir, "modules")) {
		if d := filepath.Join(dir, "modules", e.Name()); e.IsDir() && isGitDir(d) {
			f.add(d, path.Join(target, "modules", e.Name()), false)
		}
	}
}

// dirPath is a directory's host path and its target.
type dirPath struct{ dir, target string }

// search looks for dir/.git, then in dir's subdirectories. parents are
// the directories between the mount's root and dir, dir included: a
// repository found here gets them pinned, so that the sandbox cannot
// move it aside and put a repository of its own in its place.
func (f *gitFinder) search(dir, target string, depth int, parents []dirPath) {
	if git := filepath.Join(dir, ".git"); isGitDir(git) && !f.shadowed(path.Join(target, ".git")) {
		if f.repos < gitDirsMax {
			for _, p := range parents {
				if !f.pinned[p.target] {
					f.pinned[p.target] = true
					f.guards = append(f.guards, GitGuard{Dir: p.dir, Target: p.target, Pin: true})
				}
			}
		}
		f.add(git, path.Join(target, ".git"), true)
	}
	if depth == gitSearchDepth {
		return
	}
	for _, e := range f.readDir(dir) {
		// The entry's type is the directory's own record (d_type): no
		// lstat per entry; a symlink is never taken for a directory.
		if n := e.Name(); n != ".git" && e.IsDir() {
			d, t := filepath.Join(dir, n), path.Join(target, n)
			f.search(d, t, depth+1, append(parents[:len(parents):len(parents)], dirPath{d, t}))
		}
	}
}

// readDir returns dir's entries, sorted by name, taking them from the
// budget; past it, it returns what the budget allowed and marks the
// search incomplete.
func (f *gitFinder) readDir(dir string) []os.DirEntry {
	if !isDir(dir) {
		return nil
	}
	if f.budget <= 0 {
		f.complete = false
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	ents, err := d.ReadDir(f.budget)
	f.budget -= len(ents)
	if err == nil && f.budget == 0 {
		// There may be more than the budget allowed.
		if more, _ := d.ReadDir(1); len(more) > 0 {
			f.complete = false
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	return ents
}

// GitControl reports whether rel, a slash-separated path, is a file git
// reads for what to run or where its repository lies: anything under a
// .git directory's hooks, its config, config.worktree and commondir, and
// the same of the submodule and worktree git directories beneath it. A
// sandbox's change to one of them in a cow layer runs on the host once
// exported; tent diff and export flag them.
func GitControl(rel string) bool {
	elems := strings.Split(strings.Trim(rel, "/"), "/")
	for i, e := range elems {
		if !strings.EqualFold(e, ".git") { // .GIT is .git where names fold
			continue
		}
		rest := elems[i+1:]
		// .git/modules/A/modules/B/... and .git/worktrees/W/...
		for len(rest) >= 2 && (rest[0] == "modules" || rest[0] == "worktrees") {
			rest = rest[2:]
		}
		if len(rest) == 0 {
			continue
		}
		switch rest[0] {
		case "hooks":
			return true
		case "config", "config.worktree", "commondir":
			return len(rest) == 1
		}
	}
	return false
}

// isGitDir reports whether dir is a directory (not a symlink) holding a
// HEAD.
func isGitDir(dir string) bool {
	if !isDir(dir) {
		return false
	}
	fi, err := os.Lstat(filepath.Join(dir, "HEAD"))
	return err == nil && fi.Mode().IsRegular()
}

// isBareRepo reports whether dir is a bare repository: HEAD, config,
// objects and refs at its root.
func isBareRepo(dir string) bool {
	if !isGitDir(dir) || !isDir(filepath.Join(dir, "objects")) || !isDir(filepath.Join(dir, "refs")) {
		return false
	}
	fi, err := os.Lstat(filepath.Join(dir, "config"))
	return err == nil && fi.Mode().IsRegular()
}

// isDir reports whether p is a directory, without following a symlink.
func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}
