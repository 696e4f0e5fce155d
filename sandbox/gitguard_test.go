//go:build linux

package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// gitRepo makes a repository with one commit in a fresh directory owned
// and returns its path. It skips where git is
// missing (the VM's busybox image has none).
func gitRepo(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	repo := filepath.Join(dir, "repo")
	for _, args := range [][]string{
		{"init", "-q", repo},
		{"-C", repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo
}

// plantAttempts is what a hostile command tries in a repository it was
// given rw, after showing that ordinary git work goes on. Each line
// prints the step and its exit status; stderr says why each failed.
const plantAttempts = `cd /w && echo x > f && git add f && git -c user.email=s@s -c user.name=s commit -qm two; echo commit $?
git branch b1; echo branch $?
echo y >> f && git -c user.email=s@s -c user.name=s stash -q; echo stash $?
echo 'touch "$MARKER"' > .git/hooks/pre-commit && echo hook 0 || echo hook failed
git config core.fsmonitor 'touch "$MARKER"'; echo fsmonitor $?
git config core.hooksPath /tmp/x; echo hookspath $?
echo '[core] fsmonitor = x' >> .git/config && echo append 0 || echo append failed
mv .git .git-old; echo rename $?
rm -rf .git/hooks; echo rm-hooks $?`

const plantWant = "commit 0\nbranch 0\nstash 0\nhook failed\nfsmonitor 4\nhookspath 4\nappend failed\nrename 1\nrm-hooks 1"

// checkPlantErrors asserts the exact failures: writes into hooks and
// config are EROFS; git's lock-and-rename of config, renaming .git and
// removing hooks, EBUSY or EROFS as the kernel says for a mount point.
func checkPlantErrors(t *testing.T, stderr string) {
	t.Helper()
	for _, want := range []string{
		"cannot create .git/hooks/pre-commit: Read-only file system",
		"could not write config file .git/config: Device or resource busy",
		"cannot create .git/config: Read-only file system",
		"cannot move '.git' to '.git-old': Device or resource busy",
		"cannot remove '.git/hooks/pre-commit.sample': Read-only file system",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// checkHostGitRunsNothing runs git on the host in repo as its user would
// (status, a commit that runs hooks), with a marker that any planted
// hook or fsmonitor would create, and checks the repository's hooks and
// config are what git init made.
func checkHostGitRunsNothing(t *testing.T, repo string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"-c", "safe.directory=*", "-C", repo, "status", "--short"},
		{"-c", "safe.directory=*", "-C", repo, "-c", "user.email=h@h", "-c", "user.name=h", "commit", "-q", "--allow-empty", "-m", "host"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "MARKER="+marker)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("host git %v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("host git ran something the sandbox wrote")
	}
	if _, err := os.Stat(filepath.Join(repo, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a pre-commit hook was planted on the host")
	}
	cfg, err := os.ReadFile(filepath.Join(repo, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"fsmonitor", "hooksPath"} {
		if strings.Contains(string(cfg), bad) {
			t.Errorf("host .git/config holds %s:\n%s", bad, cfg)
		}
	}
}

// A sandbox given a repository rw commits, branches and stashes, but
// cannot plant a hook, change the config or swap .git, whoever owns the
// repository; the host's git then runs nothing it wrote.
func TestGitControlFilesReadOnly(t *testing.T) {
	forEachOwner(t, func(t *testing.T, dir string, uid, gid uint32) {
		repo := gitRepo(t, dir)
		if privileged() {
			chownTree(t, repo, uid, gid)
		}
		spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: repo, Target: "/w", Access: sandbox.ReadWrite}}}}
		out, stderr, err := runStderr(t, spec, "sh", "-c", plantAttempts)
		if err != nil {
			t.Fatalf("sh: %v (stdout %q, stderr %q)", err, out, stderr)
		}
		if out != plantWant {
			t.Errorf("inside: %q, want %q (stderr %q)", out, plantWant, stderr)
		}
		checkPlantErrors(t, stderr)
		checkHostGitRunsNothing(t, repo)
		if log, err := exec.Command("git", "-c", "safe.directory=*", "-C", repo, "log", "--format=%s").Output(); err != nil || string(log) != "host\ntwo\ninit\n" {
			t.Errorf("host log %q, %v: want the sandbox's commit between init and the host's", log, err)
		}
	})
}

// A repository below the mount's root cannot be moved aside and
// replaced by one the sandbox made at its path: the directories on the
// way are pinned (EBUSY), and stay writable.
func TestGitControlFilesNestedRepository(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "projects")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	repo := gitRepo(t, sub)
	if privileged() {
		chownTree(t, dir, 4321, 4321)
		skipWithoutIdmap(t, dir, sandbox.ReadWrite)
	}
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/w", Access: sandbox.ReadWrite}}}}
	out, stderr, err := runStderr(t, spec, "sh", "-c", `mv /w/projects /w/old; echo projects $?; mv /w/projects/repo /w/old; echo repo $?
echo x > /w/projects/repo/f && echo x > /w/projects/g && echo writable`)
	if err != nil || out != "projects 1\nrepo 1\nwritable" {
		t.Errorf("inside: %q, %v (stderr %q)", out, err, stderr)
	}
	if n := strings.Count(stderr, "Device or resource busy"); n != 2 {
		t.Errorf("stderr has %d EBUSY, want 2: %q", n, stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, "f")); err != nil {
		t.Errorf("the sandbox's write into the repository: %v", err)
	}
}

// The same through a mount attached to a running sandbox, and nothing
// of it with GitWritable.
func TestGitControlFilesAttachedAndOptOut(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	repo := gitRepo(t, t.TempDir())
	if privileged() {
		chownTree(t, repo, 4321, 4321)
	}
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: repo, Target: "/w", Access: sandbox.ReadWrite}); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", plantAttempts}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != plantWant {
		t.Errorf("attached: %q, want %q (stderr %q)", got, plantWant, res.Stderr)
	}
	checkPlantErrors(t, string(res.Stderr))

	writable := gitRepo(t, t.TempDir())
	if privileged() {
		chownTree(t, writable, 4321, 4321)
	}
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{GitWritable: true, Mounts: []sandbox.Mount{{Source: writable, Target: "/w", Access: sandbox.ReadWrite}}}}
	out := mustRun(t, spec, "sh", "-c", "echo '#!/bin/sh' > /w/.git/hooks/pre-commit && git -C /w config core.fsmonitor false && echo written")
	if out != "written" {
		t.Errorf("GitWritable: %q", out)
	}
	if cfg, _ := os.ReadFile(filepath.Join(writable, ".git", "config")); !strings.Contains(string(cfg), "fsmonitor = false") {
		t.Errorf("GitWritable: host config %q lacks the sandbox's change", cfg)
	}
}

// chownTree gives every entry under dir to uid:gid.
func chownTree(t *testing.T, dir string, uid, gid uint32) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}
