package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The sandbox looks like a machine to the programs in it (tent run).

// tent run --memory/--cpus: the limits are readable inside where runtimes
// look for them (cgroup v2 memory.max and cpu.max, or the v1 files), and
// writing them fails with EROFS. Without a writable cgroup the run is
// refused, and a plain run has no /sys.
func TestCLICgroupViewShowsLimits(t *testing.T) {
	t.Parallel()
	script := `if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
		echo v2; m=/sys/fs/cgroup/memory.max; cat $m /sys/fs/cgroup/cpu.max
	else
		echo v1; m=/sys/fs/cgroup/memory/memory.limit_in_bytes; cat $m /sys/fs/cgroup/cpu/cpu.cfs_quota_us
	fi
	{ echo max > $m; } 2>&1; cat $m`
	r := invocation{args: []string{"run", "--memory", "256M", "--cpus", "0.5", "--", "sh", "-c", script}, dir: t.TempDir()}.run(t)
	if r.code == 125 && strings.Contains(r.stderr, "Delegate=yes") {
		r = invocation{args: []string{"run", "--", "sh", "-c", "ls /sys 2>&1"}, dir: t.TempDir()}.run(t)
		if r.code == 0 || !strings.Contains(r.stdout, "No such file") {
			t.Fatalf("without a cgroup, /sys exists: exit %d, %q", r.code, r.stdout)
		}
		return
	}
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := map[string][]string{
		"v2": {"v2", "268435456", "50000 100000", "sh: 1: cannot create /sys/fs/cgroup/memory.max: Read-only file system", "268435456"},
		"v1": {"v1", "268435456", "50000", "sh: 1: cannot create /sys/fs/cgroup/memory/memory.limit_in_bytes: Read-only file system", "268435456"},
	}[lines[0]]
	if len(lines) != len(want) {
		t.Fatalf("inside: %q, want %q", lines, want)
	}
	for i := range want {
		// busybox sh words the EROFS refusal differently: compare its end.
		if lines[i] != want[i] && !(i == 3 && strings.HasSuffix(lines[i], "Read-only file system")) {
			t.Errorf("line %d: %q, want %q", i+1, lines[i], want[i])
		}
	}
}

// tent run --ro of a root-owned git repository, as root: the files are
// root's inside and git status works (it used to refuse the repository,
// "detected dubious ownership"); as another user, the caller's own.
func TestCLIGitStatusInReadOnlyRepository(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	repo := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "HOME="+repo, "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := invocation{args: []string{"run", "--ro", repo + ":/repo", "--workdir", "/repo", "--", "sh", "-c", "git status --porcelain 2>&1; stat -c %u .git/HEAD"}, dir: t.TempDir()}.run(t)
	r.expect(t, 0)
	if want := "?? new\n" + strconv.Itoa(os.Getuid()) + "\n"; r.stdout != want {
		t.Errorf("git status in a read-only repository of uid %d: %q, want %q", os.Getuid(), r.stdout, want)
	}
}

// tent run (own network namespace): a server binds port 80, as in a
// container.
func TestCLIBindsPort80(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is not installed")
	}
	bind := `$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 80, Listen => 1) or die "bind: $!\n"; print "bound ", $s->sockport, "\n"`
	r := invocation{args: []string{"run", "--", "perl", "-MIO::Socket::INET", "-e", bind}, dir: t.TempDir()}.run(t)
	r.expect(t, 0)
	if r.stdout != "bound 80\n" {
		t.Errorf("binding 127.0.0.1:80: %q", r.stdout)
	}
}
