//go:build linux

package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// The sandbox looks like a normal machine to the programs in it: its own
// cgroup at /sys/fs/cgroup, host ownership in read-only mounts, low ports.

// machineLimits are the limits whose values the cgroup view must show
// (the pids limit is its commands child's: cgroups.CommandsName).
var machineLimits = sandbox.Limits{Memory: 256 << 20, CPUs: 0.5, Pids: 100}

// limitFiles are, per cgroup version, the files inside that hold
// machineLimits and the values they must show.
var limitFiles = map[string][][2]string{
	"v2": {{"/sys/fs/cgroup/memory.max", "268435456"}, {"/sys/fs/cgroup/cpu.max", "50000 100000"}, {"/sys/fs/cgroup/commands/pids.max", "100"},
		{"/sys/fs/cgroup/commands/cpu.max", "50000 100000"}},
	"v1": {{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456"}, {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000"},
		{"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000"}, {"/sys/fs/cgroup/pids/commands/pids.max", "100"}},
}

// cgroupVersionOf tells a cgroup v1 directory from a v2 one by its
// filesystem.
func cgroupVersionOf(t *testing.T, dir string) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return "v2"
	case unix.CGROUP_SUPER_MAGIC:
		return "v1"
	}
	t.Fatalf("%s is on filesystem %#x, not a cgroup", dir, st.Type)
	return ""
}

// devIno is a file's identity, as stat -c %d:%i prints it.
func devIno(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// The sandbox's own cgroup, and nothing else of the host's cgroups, is
// mounted read-only at /sys/fs/cgroup: each cgroup mount inside is one
// of the sandbox's cgroup directories (same device and inode), shown
// from its root ("/" in mountinfo and /proc/self/cgroup, its cgroup
// namespace's root, but the commands' child that carries the pids limit),
// read-only, with no cgroup beneath it but that child; the limit
// files show the limits; writing a limit, the cgroup's process list, or
// creating a child cgroup fails, and the host's limit is unchanged.
// Without a cgroup (an unprivileged caller without delegation) there is
// no /sys at all.
func TestCgroupViewShowsTheSandboxsOwnCgroup(t *testing.T) {
	if !canLimit(t) {
		sb := provision(t, sandbox.Spec{})
		if len(sb.Info().CgroupPaths) != 0 {
			t.Fatalf("no cgroup limits here, yet the sandbox has cgroups %v", sb.Info().CgroupPaths)
		}
		out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "ls -d /sys 2>&1; ls /sys/fs/cgroup 2>&1"}})
		if res.ExitCode == 0 || !strings.Contains(out, "/sys") || strings.Count(out, "No such file") != 2 {
			t.Fatalf("without a cgroup, /sys exists: %q (exit %d)", out, res.ExitCode)
		}
		return
	}
	sb := provision(t, withProbe(t, sandbox.Spec{Limits: machineLimits}))
	paths := sb.Info().CgroupPaths
	if len(paths) == 0 {
		t.Fatal("the sandbox has no cgroup")
	}
	version := cgroupVersionOf(t, paths[0])
	// The init itself is in the cgroup in every hierarchy (on cgroup v1
	// its clone joins them before it execs; namespaces.Options).
	for _, p := range paths {
		procs, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(sb.Info().InitPID)) {
			t.Errorf("the init (%d) is not in %s: %q", sb.Info().InitPID, p, procs)
		}
	}
	want := map[string]bool{}
	for _, p := range paths {
		want[devIno(t, p)] = true
	}

	// Every cgroup mount inside: identity, root, options, and whether
	// anything lies beneath it.
	script := `awk '$0 ~ / - cgroup2? / {print $5, $4, $6}' /proc/self/mountinfo | while read mp root opts; do
		echo "$mp $(stat -c %d:%i "$mp") $root ${opts%%,*} $(find "$mp" -mindepth 1 -type d | wc -l)"
	done`
	out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", script}})
	if res.ExitCode != 0 {
		t.Fatalf("listing cgroup mounts: exit %d, %q", res.ExitCode, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("cgroup mount line %q", line)
		}
		mp, id, root, opt, dirs := f[0], f[1], f[2], f[3], f[4]
		if !want[id] {
			t.Errorf("%s (%s) is not one of the sandbox's cgroups %v", mp, id, paths)
		}
		seen[id] = true
		// The pids limit's child (cgroups.CommandsName), where the
		// commands are, is the one cgroup beneath.
		wantDirs := "0"
		if mp == "/sys/fs/cgroup" || mp == "/sys/fs/cgroup/pids" {
			wantDirs = "1"
		}
		if root != "/" || opt != "ro" || dirs != wantDirs {
			t.Errorf("%s: root %s, first option %s, %s directories beneath; want /, ro, %s", mp, root, opt, dirs, wantDirs)
		}
		if version == "v2" && mp != "/sys/fs/cgroup" || version == "v1" && filepath.Dir(mp) != "/sys/fs/cgroup" {
			t.Errorf("cgroup %s mounted at %s", version, mp)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("inside: %d of the sandbox's %d cgroup directories (%q)", len(seen), len(want), out)
	}

	// Every path is / (the namespace's root) but the pids controller's,
	// where the commands are in the child that carries the limit.
	out, _ = execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", "/proc/self/cgroup"}})
	for _, line := range strings.Split(out, "\n") {
		want := ":/"
		if version == "v2" && strings.HasPrefix(line, "0::") || version == "v1" && strings.Contains(line, ":pids:") {
			want = ":/commands"
		}
		if !strings.HasSuffix(line, want) {
			t.Errorf("/proc/self/cgroup shows %q, want the path to end %s", line, want)
		}
	}

	for _, lf := range limitFiles[version] {
		if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", lf[0]}}); out != lf[1] || res.ExitCode != 0 {
			t.Errorf("cat %s: %q (exit %d), want %q", lf[0], out, res.ExitCode, lf[1])
		}
	}

	checkCgroupViewWrites(t, sb, version, paths)
}

// checkCgroupViewWrites checks that the cgroup files of sb (cgroup
// version, the host's directories paths) cannot be written from inside.
func checkCgroupViewWrites(t *testing.T, sb *sandbox.Sandbox, version string, paths []string) {
	t.Helper()
	// The write side. O_TRUNC (the shell's >) needs a writable mount
	// before any permission check: EROFS. A plain O_WRONLY open is first
	// checked against the file's owner: the sandbox's own files (a
	// delegated user's cgroup) give EROFS, host root's EACCES.
	limit := limitFiles[version][0][0]
	dir := filepath.Dir(limit)
	expect(t, "truncating "+limit, probeIn(t, sb, "open", limit, "c"), "EROFS")
	expect(t, "truncating cgroup.procs", probeIn(t, sb, "open", dir+"/cgroup.procs", "c"), "EROFS")
	expect(t, "creating a child cgroup", probeIn(t, sb, "mkdir", dir+"/child"), "EROFS")
	expect(t, "creating a file in /sys/fs/cgroup", probeIn(t, sb, "open", "/sys/fs/cgroup/x", "c"), "EROFS")
	// The pids limit's child, where the commands are, and the files that
	// move a thread or a process between it and the sandbox's cgroup.
	commands, join := "/sys/fs/cgroup/commands", "cgroup.threads"
	if version == "v1" {
		commands, join = "/sys/fs/cgroup/pids/commands", "tasks"
	}
	for _, f := range []string{commands + "/pids.max", commands + "/cgroup.procs", commands + "/" + join, filepath.Dir(commands) + "/" + join} {
		expect(t, "truncating "+f, probeIn(t, sb, "open", f, "c"), "EROFS")
	}
	expect(t, "creating a cgroup in the commands' cgroup", probeIn(t, sb, "mkdir", commands+"/child"), "EROFS")
	owner, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"stat", "-c", "%u", limit}})
	self, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"id", "-u"}})
	wantWrite := "EACCES"
	if owner == self {
		wantWrite = "EROFS"
	}
	expect(t, fmt.Sprintf("opening %s (owner %s inside, sandbox uid %s) for writing", limit, owner, self), probeIn(t, sb, "open", limit, "w"), wantWrite)
	if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo max > " + limit + " 2>&1; cat " + limit}}); res.ExitCode != 0 || out != limitFiles[version][0][1] {
		t.Errorf("after echo max > %s: %q (exit %d)", limit, out, res.ExitCode)
	}
	var hostLimit string
	for _, p := range paths {
		if b, err := os.ReadFile(filepath.Join(p, filepath.Base(limit))); err == nil {
			hostLimit = strings.TrimSpace(string(b))
		}
	}
	if hostLimit != limitFiles[version][0][1] {
		t.Errorf("the host's %s is now %q", filepath.Base(limit), hostLimit)
	}
}

// A root caller's read-only mount shows host ownership: its root-owned
// directory and files are root's inside (the sandbox's user, whatever
// Spec.User says), so git trusts a root-owned repository; files of other
// owners show as nobody; it stays read-only. Root's own mode-0600 files
// in the tree are readable, as their owner. An unprivileged caller's
// files are its own, as before.
func TestReadOnlyMountShowsHostOwnership(t *testing.T) {
	dir := t.TempDir()
	if privileged() {
		// A filesystem that cannot be idmapped (tmpfs before 6.3) is
		// bound without it, which this test does not check.
		probe := t.TempDir()
		ownBySandbox(t, probe)
		skipWithoutIdmap(t, probe, sandbox.ReadWrite)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("content\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if privileged() {
		if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(dir, "other"), 4321, 4321); err != nil {
			t.Fatal(err)
		}
	}
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/data", Access: sandbox.ReadOnly}}}}
	uid := strconv.Itoa(os.Getuid())
	gid := strconv.Itoa(os.Getgid())
	if got := mustRun(t, spec, "stat", "-c", "%u:%g", "/data", "/data/f"); got != uid+":"+gid+"\n"+uid+":"+gid {
		t.Errorf("owners inside: %q, want %s:%s twice", got, uid, gid)
	}
	if got := mustRun(t, spec, "cat", "/data/f"); got != "content" {
		t.Errorf("reading the caller's 0600 file: %q", got)
	}
	if got := mustRun(t, spec, "sh", "-c", "{ echo x > /data/f; } 2>&1; touch /data/new 2>&1; true"); strings.Count(got, "Read-only file system") != 2 {
		t.Errorf("writing the ro mount: %q, want EROFS twice", got)
	}
	if !privileged() {
		return
	}
	if got := mustRun(t, spec, "stat", "-c", "%u:%g", "/data/other"); got != "65534:65534" {
		t.Errorf("a file of uid 4321 shows as %q inside, want nobody (65534:65534)", got)
	}
	spec.User = &sandbox.User{UID: 1000, GID: 1000}
	if got := mustRun(t, spec, "sh", "-c", "id -u; stat -c %u:%g /data/f"); got != "1000\n1000:1000" {
		t.Errorf("with --user 1000: %q, want root's files owned by 1000:1000", got)
	}
}

// git works in a root-owned repository mounted read-only by root (it
// used to refuse it: "detected dubious ownership", the files showing as
// nobody), and in the caller's own repository otherwise.
func TestGitStatusInReadOnlyRepository(t *testing.T) {
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
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: repo, Target: "/repo", Access: sandbox.ReadOnly}}}, Identity: sandbox.Identity{Workdir: "/repo"}}
	out, _, err := run(t, spec, "sh", "-c", "git status --porcelain 2>&1; stat -c %u .")
	if err != nil || out != "?? new\n"+strconv.Itoa(os.Getuid()) {
		t.Fatalf("git status in a read-only repository of uid %d: %q, %v; want the untracked file and the caller's uid", os.Getuid(), out, err)
	}
}

// A sandbox with its own network namespace may bind any port, as in a
// container (net.ipv4.ip_unprivileged_port_start=0 there); the host's
// setting is untouched, and a sandbox on the host's network keeps it.
func TestLowPortsInOwnNetworkNamespace(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is not installed")
	}
	const sysctl = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
	before, err := os.ReadFile(sysctl)
	if err != nil {
		t.Skipf("no %s: %v", sysctl, err)
	}
	bind := `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 80, Listen => 1) or die "bind: $!\n"; print "bound ", $s->sockport, "\n"' 2>&1; cat ` + sysctl
	out, _, err := run(t, sandbox.Spec{}, "sh", "-c", bind)
	if err != nil || out != "bound 80\n0" {
		t.Errorf("binding 127.0.0.1:80 in the sandbox's network namespace: %q, %v; want bound, the sysctl 0", out, err)
	}
	out, _, err = run(t, sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}, "cat", sysctl)
	if err != nil || out != strings.TrimSpace(string(before)) {
		t.Errorf("--net host sees %s = %q (%v), the host %q", sysctl, out, err, before)
	}
	if after, _ := os.ReadFile(sysctl); string(after) != string(before) {
		t.Errorf("the host's %s changed from %q to %q", sysctl, before, after)
	}
}
