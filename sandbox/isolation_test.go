//go:build linux

package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

func TestPidNamespaceShowsOnlyOwnProcesses(t *testing.T) {
	out := mustRun(t, sandbox.Spec{}, "sh", "-c", `echo $$; for p in /proc/[0-9]*; do echo ${p#/proc/}; done; cat /proc/1/cmdline | tr '\0' ' '`)
	lines := strings.Split(out, "\n")
	// Pids 2.. are the init's runtime threads and the command.
	if n, _ := strconv.Atoi(lines[0]); n < 2 || n > 32 {
		t.Errorf("the command's pid is %s, want a small pid of a fresh namespace", lines[0])
	}
	procs := lines[1 : len(lines)-1]
	if len(procs) > 4 { // init, sh, and the shell's subshells at most
		t.Errorf("more processes than the sandbox's own are visible: %v", procs)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "tent-init") {
		t.Errorf("PID 1 is %q, want tent-init", lines[len(lines)-1])
	}
}

func TestCgroupNamespaceHidesTheHostHierarchy(t *testing.T) {
	out := mustRun(t, sandbox.Spec{}, "cat", "/proc/self/cgroup")
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("the command sees a host cgroup path: %q", line)
		}
	}
}

func TestUserNamespaceMapsExactlyOneID(t *testing.T) {
	for _, f := range []string{"uid_map", "gid_map"} {
		fields := strings.Fields(mustRun(t, sandbox.Spec{}, "cat", "/proc/self/"+f))
		if len(fields) != 3 || fields[2] != "1" {
			t.Errorf("%s = %v, want one mapping of size 1", f, fields)
		}
	}
}

func TestHostnameIsNeverTheHosts(t *testing.T) {
	expect(t, "default hostname", mustRun(t, sandbox.Spec{}, "hostname"), sandbox.DefaultHostname)
	expect(t, "custom hostname", mustRun(t, sandbox.Spec{Identity: sandbox.Identity{Hostname: "box"}}, "hostname"), "box")
}

// TestBootIDIsTheSandboxsOwn: /proc/sys/kernel/random/boot_id is drawn
// per sandbox (a resume or a fork is a new boot): never the host's, a
// UUID, and read-only.
func TestBootIDIsTheSandboxsOwn(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id on this host: %v", err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	script := `cat /proc/sys/kernel/random/boot_id; (echo x > /proc/sys/kernel/random/boot_id) 2>/dev/null && echo writable; ls -a / | grep tent; true`
	a := strings.TrimSpace(mustRun(t, sandbox.Spec{}, "sh", "-c", script))
	b := strings.TrimSpace(mustRun(t, sandbox.Spec{}, "sh", "-c", script))
	if !uuid.MatchString(a) || !uuid.MatchString(b) {
		t.Fatalf("boot ids %q and %q: want one UUID each, read-only, and nothing left in /", a, b)
	}
	if a == b || a == strings.TrimSpace(string(host)) {
		t.Fatalf("boot ids %q and %q, host %q: want each sandbox's own", a, b, host)
	}
}

func TestHostSysVIPCIsOutOfReach(t *testing.T) {
	const key = 0x7e57
	id, _, errno := syscall.Syscall(syscall.SYS_MSGGET, key, unix.IPC_CREAT|0o666, 0)
	if errno != 0 {
		t.Fatalf("msgget on the host: %v", errno)
	}
	defer syscall.Syscall(syscall.SYS_MSGCTL, id, unix.IPC_RMID, 0)
	expect(t, "msgget of a host queue", probe(t, sandbox.Spec{}, "msgget", strconv.Itoa(key)), "ENOENT")
}

func TestHostAbstractSocketsAreOutOfReach(t *testing.T) {
	name := fmt.Sprintf("tent-test-%d", os.Getpid())
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Own network namespace: the name does not exist there.
	expect(t, "abstract socket, --net none", probe(t, sandbox.Spec{}, "abstract", name), "ECONNREFUSED")
	// Host network: Landlock's abstract-socket scope (ABI 6) refuses it.
	if abi := landlockABI(t); abi < 6 {
		t.Skipf("Landlock ABI %d < 6: no abstract-socket scoping (reported as degraded)", abi)
	}
	expect(t, "abstract socket, --net host", probe(t, sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}, "abstract", name), "EPERM")
}

func TestNetNoneHasOnlyLoopback(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	expect(t, "host loopback listener", probe(t, sandbox.Spec{}, "tcp", "127.0.0.1", port), "ECONNREFUSED")
	expect(t, "outside address", probe(t, sandbox.Spec{}, "tcp", "192.0.2.1", "80"), "ENETUNREACH")
	out := mustRun(t, sandbox.Spec{}, "cat", "/proc/net/dev")
	if strings.Contains(out, "eth") || strings.Contains(out, "ens") || !strings.Contains(out, "lo:") {
		t.Errorf("interfaces inside --net none:\n%s", out)
	}
}

func TestRootFilesystemHidesTheHost(t *testing.T) {
	marker, err := os.CreateTemp("", "tent-host-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	defer os.Remove(marker.Name())
	for _, p := range []string{"/var", "/run", "/mnt", "/srv", "/boot", "/work", marker.Name()} {
		expect(t, "visibility of "+p, probe(t, sandbox.Spec{}, "open", p, "r"), "ENOENT")
	}
	// /sys holds at most the sandbox's own cgroup, at /sys/fs/cgroup
	// (TestCgroupViewShowsTheSandboxsOwnCgroup checks what is there).
	switch out := mustRun(t, sandbox.Spec{}, "sh", "-c", "find /sys -maxdepth 2 2>/dev/null; true"); out {
	case "", "/sys\n/sys/fs\n/sys/fs/cgroup":
	default:
		t.Errorf("/sys shows more than the sandbox's cgroup: %q", out)
	}
	if !privileged() {
		expect(t, "/root for a user", probe(t, sandbox.Spec{}, "open", "/root", "r"), "ENOENT")
	}
	out := mustRun(t, sandbox.Spec{}, "ls", "/tmp")
	expect(t, "the sandbox's /tmp", out, "")
	// /home holds at most the sandbox user's own (empty, tmpfs) home.
	if out := mustRun(t, sandbox.Spec{}, "sh", "-c", "ls -A /home 2>/dev/null; ls -A $HOME"); strings.Count(out, "\n") > 0 {
		t.Errorf("host home directories are visible: %q", out)
	}
	out = mustRun(t, sandbox.Spec{}, "ls", "/dev")
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty", "pts", "shm"} {
		if !strings.Contains("\n"+out+"\n", "\n"+n+"\n") {
			t.Errorf("/dev lacks %s: %q", n, out)
		}
	}
	if strings.Contains(out, "sda") || strings.Contains(out, "vda") || strings.Contains(out, "kmsg") {
		t.Errorf("/dev exposes host devices: %q", out)
	}
	mustRun(t, sandbox.Spec{}, "sh", "-c", "echo hi > /dev/null && head -c 1 /dev/urandom >/dev/null && echo x > /tmp/x && echo y > $HOME/y && echo z > /dev/shm/z")
}

func TestSystemDirectoriesAreReadOnly(t *testing.T) {
	expect(t, "create in /usr", probe(t, sandbox.Spec{}, "open", "/usr/tent-test", "c"), "EROFS")
	// Host files keep their owners: the sandbox is never their owner.
	expect(t, "write /etc/hostname", probe(t, sandbox.Spec{}, "open", "/etc/hostname", "w"), "EACCES")
	expect(t, "create in /", probe(t, sandbox.Spec{}, "mkdir", "/newdir"), "EROFS")
	expect(t, "create in /dev", probe(t, sandbox.Spec{}, "open", "/dev/evil", "c"), "EROFS")
}

func TestReadOnlyAndReadWriteMounts(t *testing.T) {
	ro, rw := t.TempDir(), rwDir(t)
	for _, d := range []string{ro, rw} {
		os.Chmod(d, 0o777)
	}
	os.WriteFile(filepath.Join(ro, "file"), []byte("ro"), 0o666)
	os.Chmod(filepath.Join(ro, "file"), 0o666) // writable for everyone but for the mount
	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: ro, Target: "/in", Access: sandbox.ReadOnly},
				{Source: rw, Target: "/out", Access: sandbox.ReadWrite},
			},
		},
	}
	expect(t, "write into a ro mount", probe(t, spec, "open", "/in/new", "c"), "EROFS")
	expect(t, "overwrite in a ro mount", probe(t, spec, "open", "/in/file", "w"), "EROFS")
	mustRun(t, spec, "sh", "-c", "cat /in/file > /out/copied && mkdir /out/dir")
	if b, err := os.ReadFile(filepath.Join(rw, "copied")); err != nil || string(b) != "ro" {
		t.Errorf("rw write did not reach the host: %q, %v", b, err)
	}
}

func TestSymlinkInMountedSourceCannotRedirectTargets(t *testing.T) {
	src, outside, other := rwDir(t), t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: src, Target: "/work", Access: sandbox.ReadWrite},
				{Source: other, Target: "/work/link/escape", Access: sandbox.ReadOnly},
			},
		},
	}
	_, _, err := run(t, spec, "true")
	if !errorsIs(err, syscall.ELOOP) {
		t.Fatalf("planting a symlink: got %v, want ELOOP", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the symlink redirected a mount target onto the host: %v", ents)
	}
}
