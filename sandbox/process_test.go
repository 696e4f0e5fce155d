//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/seccomp"
)

func TestCommandHasNoPrivileges(t *testing.T) {
	out := mustRun(t, sandbox.Spec{}, "grep", "-E", "^(Cap|NoNewPrivs|Seccomp:|SigIgn|SigBlk)", "/proc/self/status")
	want := map[string]string{
		"SigBlk": "0000000000000000", // nothing inherited from the init
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, ":")
		got[k] = strings.TrimSpace(v)
	}
	// No standard signal is ignored (the init catches, never ignores,
	// the ones it must not die of). Bits 32+ are libc's realtime signals,
	// whose dispositions the race runtime may set.
	if ign, err := strconv.ParseUint(got["SigIgn"], 16, 64); err != nil || ign&0x7fffffff != 0 {
		t.Errorf("SigIgn = %q: the command inherited ignored signals", got["SigIgn"])
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestCommandRunsInItsOwnSession(t *testing.T) {
	expect(t, "session leader", probe(t, sandbox.Spec{}, "sid"), "true")
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

func TestTIOCSTIIntoTheCallersTerminalFails(t *testing.T) {
	_, slave := openPTY(t)
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		args []string
		want string
	}{
		{"default seccomp", sandbox.Spec{}, []string{"tiocsti", "0"}, "EPERM"},
		{"default seccomp, high bits set", sandbox.Spec{}, []string{"tiocsti", "0", "high"}, "EPERM"},
		// Without seccomp the new session still protects the terminal:
		// it is not the command's controlling terminal.
		{"unconfined", sandbox.Spec{Seccomp: sandbox.Seccomp{Unconfined: true}}, []string{"tiocsti", "0"}, "EPERM"},
	} {
		cmd := sandbox.Command(context.Background(), withProbe(t, tc.spec), probeTarget+"/testprobe", tc.args...)
		var out bytes.Buffer
		cmd.Stdin, cmd.Stdout = slave, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		expect(t, "TIOCSTI, "+tc.name, strings.TrimSpace(out.String()), tc.want)
	}
}

func TestNoDescriptorBeyondStdioIsInherited(t *testing.T) {
	// Descriptors the caller holds without close-on-exec must not leak:
	// one on a file with a unique name must not be among the command's.
	// (The command lists what it holds rather than counting: a shell or a
	// Go runtime keeps descriptors of its own — Go 1.25 the cgroup's CPU
	// quota files where /sys/fs/cgroup is visible, busybox sh one more.)
	f, err := os.CreateTemp("", "tent-leak-marker-")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(f.Name())
	fd, err := syscall.Open(f.Name(), syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out := mustRun(t, sandbox.Spec{}, "sh", "-c", `for f in /proc/$$/fd/*; do echo "${f##*/} $(readlink "$f")"; done`)
	// readlink works here (else the marker could not show): stdin is
	// /dev/null.
	if !strings.Contains("\n"+out, "\n0 /dev/null") {
		t.Fatalf("the command's descriptors, unread:\n%s", out)
	}
	if strings.Contains(out, "tent-leak-marker-") {
		t.Fatalf("the command holds the caller's descriptor:\n%s", out)
	}
	for _, want := range []string{"0 ", "1 ", "2 "} {
		if !strings.Contains("\n"+out, "\n"+want) {
			t.Errorf("the command lacks fd %s:\n%s", want, out)
		}
	}
}

func TestInitCannotBeTracedOrRead(t *testing.T) {
	for _, spec := range []sandbox.Spec{{}, {Seccomp: sandbox.Seccomp{Unconfined: true}}} {
		expect(t, "ptrace(PTRACE_ATTACH, 1)", probe(t, spec, "ptrace", "1"), "EPERM")
		expect(t, "open /proc/1/mem", probe(t, spec, "open", "/proc/1/mem", "r"), "EACCES")
		expect(t, "open /proc/1/exe for writing", probe(t, spec, "open", "/proc/1/exe", "w"), "EACCES")
	}
}

func TestHostBinaryCannotBeModifiedThroughProcExe(t *testing.T) {
	// In the unprivileged run the test binary (the init) is owned by the
	// user running it: only the sandbox stops the write.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(self)
	spec := sandbox.Spec{Seccomp: sandbox.Seccomp{Unconfined: true}}
	expect(t, "open /proc/1/exe O_WRONLY", probe(t, spec, "open", "/proc/1/exe", "w"), "EACCES")
	out := mustRun(t, spec, "sh", "-c", "echo pwned > /proc/1/exe; echo $?")
	if out == "0" {
		t.Fatal("shell redirection into /proc/1/exe succeeded")
	}
	after, _ := os.ReadFile(self)
	if sha256.Sum256(before) != sha256.Sum256(after) {
		t.Fatal("the host binary changed")
	}
}

func TestLandlockIsEnforcedAndReported(t *testing.T) {
	// A host directory anyone may write, passed as stdin (passed as it
	// is: tent relays only regular files, pipes and sockets): DAC and the
	// mount allow creating a file in it through /proc/self/fd/0, only
	// Landlock refuses.
	dir := landlockProbeDir(t)
	cmd := sandbox.Command(context.Background(), withProbe(t, sandbox.Spec{}), probeTarget+"/testprobe", "open", "/proc/self/fd/0/x", "c")
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout = dir, &out
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	expect(t, "create a file in a host directory given as stdin", strings.TrimSpace(out.String()), "EACCES")
	if ents, _ := os.ReadDir(dir.Name()); len(ents) != 0 {
		t.Fatalf("the host directory got %v", ents)
	}
	if cmd.Report.LandlockABI < 6 {
		p, _ := protectionOf(cmd.Report, "landlock")
		if p.Status != sandbox.Degraded {
			t.Errorf("Landlock ABI %d reported as %+v, want degraded", cmd.Report.LandlockABI, p)
		}
		t.Skipf("Landlock ABI %d < 6: no signal scoping", cmd.Report.LandlockABI)
	}
	// Signal scoping: the init is outside the command's domain.
	expect(t, "kill(1, 0)", probe(t, sandbox.Spec{Seccomp: sandbox.Seccomp{Unconfined: true}}, "kill", "1"), "EPERM")
	p, _ := protectionOf(cmd.Report, "landlock")
	if p.Status != sandbox.Enforced || cmd.Report.LandlockABI != min(landlockABI(t), 7) {
		t.Errorf("report: %+v, ABI %d", p, cmd.Report.LandlockABI)
	}
}

func landlockABI(t *testing.T) int {
	v, _, errno := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		t.Skipf("no Landlock: %v", errno)
	}
	return int(v)
}

func TestDefaultSeccompProfile(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"io_uring_setup", []string{"syscall", strconv.Itoa(unix.SYS_IO_URING_SETUP)}, "EPERM"},
		{"userfaultfd", []string{"syscall", strconv.Itoa(unix.SYS_USERFAULTFD)}, "EPERM"},
		{"keyctl", []string{"syscall", strconv.Itoa(unix.SYS_KEYCTL)}, "EPERM"},
		{"bpf", []string{"syscall", strconv.Itoa(unix.SYS_BPF)}, "EPERM"},
		{"perf_event_open", []string{"syscall", strconv.Itoa(unix.SYS_PERF_EVENT_OPEN)}, "EPERM"},
		{"open_tree", []string{"syscall", strconv.Itoa(unix.SYS_OPEN_TREE)}, "EPERM"},
		{"fsopen", []string{"syscall", strconv.Itoa(unix.SYS_FSOPEN)}, "EPERM"},
		{"mount", []string{"syscall", strconv.Itoa(unix.SYS_MOUNT)}, "EPERM"},
		{"clone3 falls back", []string{"syscall", strconv.Itoa(unix.SYS_CLONE3)}, "ENOSYS"},
		{"unknown syscall", []string{"syscall", "1000"}, "ENOSYS"},
		{"unshare(CLONE_NEWUSER)", []string{"unshare", "0x10000000"}, "EPERM"},
		{"AF_VSOCK", []string{"socket", "40", "1"}, "EPERM"},
		{"AF_ALG", []string{"socket", "38", "5"}, "EPERM"},
		{"AF_PACKET", []string{"socket", "17", "3"}, "EPERM"},
		{"raw IPv4", []string{"socket", "2", strconv.Itoa(unix.SOCK_RAW | unix.SOCK_CLOEXEC)}, "EPERM"},
		{"TCP socket", []string{"socket", "2", "1"}, "ok"},
		{"personality query", []string{"syscall", strconv.Itoa(unix.SYS_PERSONALITY), "0xffffffff"}, "ok"},
		{"personality(ADDR_NO_RANDOMIZE)", []string{"syscall", strconv.Itoa(unix.SYS_PERSONALITY), "0x0040000"}, "EPERM"},
		{"ptrace(PTRACE_TRACEME)", []string{"syscall", strconv.Itoa(unix.SYS_PTRACE), "0"}, "EPERM"},
		{"process_vm_readv", []string{"syscall", strconv.Itoa(unix.SYS_PROCESS_VM_READV), "1"}, "EPERM"},
		{"kexec_load", []string{"syscall", strconv.Itoa(unix.SYS_KEXEC_LOAD)}, "EPERM"},
		{"init_module", []string{"syscall", strconv.Itoa(unix.SYS_INIT_MODULE)}, "EPERM"},
		{"open_by_handle_at", []string{"syscall", strconv.Itoa(unix.SYS_OPEN_BY_HANDLE_AT)}, "EPERM"},
		{"pivot_root", []string{"syscall", strconv.Itoa(unix.SYS_PIVOT_ROOT)}, "EPERM"},
		{"chroot", []string{"syscall", strconv.Itoa(unix.SYS_CHROOT)}, "EPERM"},
		{"move_mount", []string{"syscall", strconv.Itoa(unix.SYS_MOVE_MOUNT)}, "EPERM"},
		{"add_key", []string{"syscall", strconv.Itoa(unix.SYS_ADD_KEY)}, "EPERM"},
		{"setns", []string{"syscall", strconv.Itoa(unix.SYS_SETNS)}, "EPERM"},
	} {
		expect(t, tc.name, probe(t, sandbox.Spec{}, tc.args...), tc.want)
	}
}

func TestDockerSeccompProfileLoadsAndWorks(t *testing.T) {
	prof, err := seccomp.Load("../seccomp/testdata/docker-default.json")
	if err != nil {
		t.Fatalf("the Docker profile (seccomp/testdata, committed): %v", err)
	}
	spec := sandbox.Spec{Seccomp: sandbox.Seccomp{Profile: prof}}
	mustRun(t, spec, "/bin/true")
	expect(t, "keyctl under Docker's profile", probe(t, spec, "syscall", strconv.Itoa(unix.SYS_KEYCTL)), "EPERM")
	expect(t, "unshare(CLONE_NEWUSER) under Docker's profile", probe(t, spec, "unshare", "0x10000000"), "EPERM")
}

func TestHostNetworkModeSharesTheNetwork(t *testing.T) {
	out := mustRun(t, sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}, "cat", "/proc/net/dev")
	host, _ := os.ReadFile("/proc/net/dev")
	if strings.Count(out, ":") != strings.Count(string(host), ":") {
		t.Errorf("--net host does not show the host's interfaces:\n%s", out)
	}
}

// landlockProbeDir returns an open host directory anyone may write, for
// a command to reach through /proc/self/fd: only Landlock stands between
// it and a file created there.
func landlockProbeDir(t *testing.T) *os.File {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A profile kept over the default (Seccomp.KeepDefault: what tent-runc
// does with a pod's RuntimeDefault or Localhost profile) can only narrow
// what tent allows: one that allows everything leaves tent's refusals in
// place (a new user namespace: EPERM, which the same profile alone
// lets reach the kernel), one that denies mkdir denies it, and a root caller's rw mount
// of a root-owned directory, which needs the default profile's set-id
// refusal, is accepted and refuses set-id modes.
func TestSeccompProfileOverDefault(t *testing.T) {
	allowAll := &seccomp.Profile{DefaultAction: "SCMP_ACT_ALLOW"}
	// Alone, the call reaches the kernel, which refuses a threaded
	// process (the probe is Go) a new user namespace: EINVAL, not EPERM.
	expect(t, "new user namespace under allow-all alone", probe(t, sandbox.Spec{Seccomp: sandbox.Seccomp{Profile: allowAll}}, "unshare", "0x10000000"), "EINVAL")
	over := sandbox.Spec{Seccomp: sandbox.Seccomp{Profile: allowAll, KeepDefault: true}}
	expect(t, "new user namespace under allow-all over the default", probe(t, over, "unshare", "0x10000000"), "EPERM")
	eacces := uint(13)
	denyMkdir := &seccomp.Profile{DefaultAction: "SCMP_ACT_ALLOW", Syscalls: []seccomp.Syscall{{Names: []string{"mkdir", "mkdirat"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eacces}}}
	expect(t, "mkdir under a profile denying it, over the default", probe(t, sandbox.Spec{Seccomp: sandbox.Seccomp{Profile: denyMkdir, KeepDefault: true}}, "mkdir", "/tmp/d"), "EACCES")
	if !privileged() {
		return
	}
	dir := t.TempDir() // root's
	skipWithoutIdmap(t, dir, sandbox.ReadWrite)
	spec := sandbox.Spec{Seccomp: over.Seccomp, Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/out", Access: sandbox.ReadWrite}}}}
	out := mustRun(t, spec, "sh", "-c", "touch /out/s && chmod 4755 /out/s 2>&1; stat -c %a /out/s")
	if !strings.Contains(out, "Operation not permitted") || !strings.HasSuffix(out, "644") {
		t.Errorf("chmod 4755 in a root-owned rw mount under a profile over the default: %q, want EPERM and 644", out)
	}
}
