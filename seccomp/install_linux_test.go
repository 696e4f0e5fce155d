//go:build linux

package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The installing tests re-run the test binary as a helper child (the
// os/exec helper-process pattern): a seccomp filter cannot be removed, so
// it must not touch the test process. The child's contract:
//
//	TENT_SECCOMP_HELPER=<profile>:<case>  profile is "default" or "docker"
//	TENT_SECCOMP_ARG=<path>               the program the exec cases run
//
// It locks its main thread, compiles the profile, sets no_new_privs,
// installs the filter on that thread, makes the case's syscall there and
// prints "errno=N" (0 for success) or the exec'd program's output. Exit
// status 3 means the helper itself failed before the filter was in place.
const (
	helperEnv    = "TENT_SECCOMP_HELPER"
	helperArgEnv = "TENT_SECCOMP_ARG"
)

func TestMain(m *testing.M) {
	if c := os.Getenv(helperEnv); c != "" {
		// TestMain runs on the main goroutine; keep it on this thread so
		// the filter and the syscalls below share it.
		runtime.LockOSThread()
		os.Exit(helper(c))
	}
	os.Exit(m.Run())
}

func helper(spec string) int {
	profileName, name, _ := strings.Cut(spec, ":")
	var p *Profile
	switch profileName {
	case "default":
		p = Default()
	case "docker":
		var err error
		if p, err = Load(dockerProfile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	case "guard": // the default profile with the network guard stacked on it
		p = Default()
	default:
		fmt.Fprintf(os.Stderr, "unknown profile %q\n", profileName)
		return 3
	}
	prog, err := Compile(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "prctl:", err)
		return 3
	}
	progs := []Program{prog}
	if profileName == "guard" {
		g, err := Compile(GuardProfile(Guard{NoNetwork: true}))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		progs = append(progs, g)
	}
	for _, prog := range progs {
		if err := prog.Install(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	if name == "exec" {
		path := os.Getenv(helperArgEnv)
		err := syscall.Exec(path, []string{path}, os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 3
	}
	if name == "sh" {
		err := syscall.Exec("/bin/sh", []string{"sh", "-c",
			"/bin/true && grep -q '^Seccomp:[[:space:]]*2' /proc/self/status && ls / >/dev/null && echo ok"},
			os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 3
	}
	nr, args, ok := helperCalls(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown case %q\n", name)
		return 3
	}
	r, _, errno := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if name == "getpid" && errno == 0 && int(r) != os.Getpid() {
		fmt.Fprintf(os.Stderr, "getpid = %d, want %d\n", r, os.Getpid())
		return 3
	}
	fmt.Printf("errno=%d\n", errno)
	return 0
}

// Buffers the helper's syscalls point at: they only run if a filter lets
// them through, which is a test failure anyway.
var (
	ioUringParams [120]byte
	rootPath      = []byte("/\x00")
	tmpfsPath     = []byte("tmpfs\x00")
	nowherePath   = []byte("/nonexistent-tent-seccomp-test\x00")
	ioctlArg      int32
	pairFDs       [2]int32
)

// helperCalls returns the syscall a case makes.
func helperCalls(name string) (uintptr, [6]uintptr, bool) {
	ptr := func(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
	neg := func(n int) uintptr { return uintptr(n) }
	calls := map[string]struct {
		nr   uintptr
		args [6]uintptr
	}{
		"getpid":          {unix.SYS_GETPID, [6]uintptr{}},
		"io_uring_setup":  {unix.SYS_IO_URING_SETUP, [6]uintptr{1, uintptr(unsafe.Pointer(&ioUringParams))}},
		"keyctl":          {unix.SYS_KEYCTL, [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, neg(unix.KEY_SPEC_SESSION_KEYRING)}},
		"bpf":             {unix.SYS_BPF, [6]uintptr{unix.BPF_PROG_LOAD, 0, 0}},
		"unshare_user":    {unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
		"clone3":          {unix.SYS_CLONE3, [6]uintptr{0, 0}},
		"tiocsti_high":    {unix.SYS_IOCTL, [6]uintptr{0, 0xffffffff00005412, uintptr(unsafe.Pointer(&ioctlArg))}},
		"tcgets":          {unix.SYS_IOCTL, [6]uintptr{^uintptr(0), unix.TCGETS, uintptr(unsafe.Pointer(&ioctlArg))}},
		"socket_vsock":    {unix.SYS_SOCKET, [6]uintptr{unix.AF_VSOCK, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}},
		"socket_raw":      {unix.SYS_SOCKET, [6]uintptr{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP}},
		"mount":           {unix.SYS_MOUNT, [6]uintptr{ptr(tmpfsPath), ptr(nowherePath), ptr(tmpfsPath)}},
		"open_tree":       {unix.SYS_OPEN_TREE, [6]uintptr{neg(unix.AT_FDCWD), ptr(rootPath), unix.OPEN_TREE_CLOEXEC}},
		"ptrace":          {unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_PEEKDATA, 1}},
		"syscall999":      {999, [6]uintptr{}},
		"x32_getpid":      {0x40000000 | unix.SYS_GETPID, [6]uintptr{}},
		"socket_inet":     {unix.SYS_SOCKET, [6]uintptr{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}},
		"socket_netlink":  {unix.SYS_SOCKET, [6]uintptr{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC}},
		"socket_unix":     {unix.SYS_SOCKET, [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}},
		"socketpair_unix": {unix.SYS_SOCKETPAIR, [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0, uintptr(unsafe.Pointer(&pairFDs))}},
	}
	c, ok := calls[name]
	return c.nr, c.args, ok
}

type helperResult struct {
	out    string
	signal syscall.Signal // 0 unless the child died of a signal
}

// runHelper runs the test binary as a helper child for spec.
func runHelper(t *testing.T, spec, arg string) helperResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+spec, helperArgEnv+"="+arg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return helperResult{out: strings.TrimSpace(string(out))}
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return helperResult{out: string(out), signal: ws.Signal()}
		}
	}
	t.Fatalf("helper %s: %v\nstdout: %s\nstderr: %s", spec, err, out, stderr.String())
	return helperResult{}
}

// needSeccomp skips unless this kernel can install filters.
func needSeccomp(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("helper syscalls are written for x86-64, not %s", runtime.GOARCH)
	}
	if err := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0); errors.Is(err, unix.EINVAL) {
		t.Skip("kernel built without CONFIG_SECCOMP")
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0,
		uintptr(unsafe.Pointer(&[]uint32{unix.SECCOMP_RET_KILL_PROCESS}[0]))); errno != 0 {
		t.Skipf("kernel lacks SECCOMP_RET_KILL_PROCESS (4.14): %v", errno)
	}
}

func TestInstallDefault(t *testing.T) {
	needSeccomp(t)
	for _, tc := range []struct {
		name string
		want syscall.Errno
	}{
		{"getpid", 0},
		{"io_uring_setup", unix.EPERM},
		{"keyctl", unix.EPERM},
		{"bpf", unix.EPERM},
		{"unshare_user", unix.EPERM},
		{"clone3", unix.ENOSYS},
		{"tiocsti_high", unix.EPERM},
		{"tcgets", unix.EBADF}, // allowed: the kernel itself rejects fd -1
		{"socket_vsock", unix.EPERM},
		{"socket_raw", unix.EPERM},
		{"mount", unix.EPERM},
		{"open_tree", unix.EPERM},
		{"ptrace", unix.EPERM},
		{"syscall999", unix.ENOSYS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runHelper(t, "default:"+tc.name, "")
			if want := fmt.Sprintf("errno=%d", tc.want); r.signal != 0 || r.out != want {
				t.Errorf("got %q (signal %d), want %q (%v)", r.out, r.signal, want, tc.want)
			}
		})
	}
}

func TestInstallKillsX32(t *testing.T) {
	needSeccomp(t)
	if r := runHelper(t, "default:x32_getpid", ""); r.signal != unix.SIGSYS {
		t.Errorf("x32 getpid: output %q, signal %v; want death by SIGSYS", r.out, r.signal)
	}
}

// TestInstallKillsI386 runs a 139-byte static x86-64 program that makes an
// i386 syscall with int $0x80 (getpid) and exits 42 if it survives; the
// assembly lives in the ELF image, not in the package.
func TestInstallKillsI386(t *testing.T) {
	needSeccomp(t)
	path := filepath.Join(t.TempDir(), "int80")
	if err := os.WriteFile(path, int80ELF(), 0o755); err != nil {
		t.Fatal(err)
	}
	err := exec.Command(path).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Skipf("int $0x80 fails here even without a filter (no IA32 emulation in this kernel or hypervisor): %v; "+
			"TestDefaultVerdicts covers the i386 verdict in the BPF interpreter", err)
	}
	if r := runHelper(t, "default:exec", path); r.signal != unix.SIGSYS {
		t.Errorf("int $0x80: output %q, signal %v; want death by SIGSYS", r.out, r.signal)
	}
}

// int80ELF returns a minimal static ELF64 executable:
//
//	mov eax, 20 ; int 0x80 ; mov eax, 60 ; mov edi, 42 ; syscall
func int80ELF() []byte {
	const base, hdr = 0x400000, 64 + 56
	code := []byte{0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xb8, 60, 0, 0, 0, 0xbf, 42, 0, 0, 0, 0x0f, 0x05}
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2)        // e_type: ET_EXEC
	b = le.AppendUint16(b, 0x3e)     // e_machine: EM_X86_64
	b = le.AppendUint32(b, 1)        // e_version
	b = le.AppendUint64(b, base+hdr) // e_entry
	b = le.AppendUint64(b, 64)       // e_phoff
	b = le.AppendUint64(b, 0)        // e_shoff
	b = le.AppendUint32(b, 0)        // e_flags
	b = le.AppendUint16(b, 64)       // e_ehsize
	b = le.AppendUint16(b, 56)       // e_phentsize
	b = le.AppendUint16(b, 1)        // e_phnum
	b = le.AppendUint16(b, 64)       // e_shentsize
	b = le.AppendUint16(b, 0)        // e_shnum
	b = le.AppendUint16(b, 0)        // e_shstrndx
	b = le.AppendUint32(b, 1)        // p_type: PT_LOAD
	b = le.AppendUint32(b, 5)        // p_flags: R+X
	b = le.AppendUint64(b, 0)        // p_offset
	b = le.AppendUint64(b, base)     // p_vaddr
	b = le.AppendUint64(b, base)     // p_paddr
	size := uint64(hdr + len(code))
	b = le.AppendUint64(b, size)   // p_filesz
	b = le.AppendUint64(b, size)   // p_memsz
	b = le.AppendUint64(b, 0x1000) // p_align
	return append(b, code...)
}

func TestInstallDefaultRunsShell(t *testing.T) {
	needSeccomp(t)
	if r := runHelper(t, "default:sh", ""); r.signal != 0 || r.out != "ok" {
		t.Errorf("sh under the default profile: output %q, signal %v; want \"ok\"", r.out, r.signal)
	}
}

func TestInstallDockerProfile(t *testing.T) {
	needSeccomp(t)
	if r := runHelper(t, "docker:keyctl", ""); r.out != fmt.Sprintf("errno=%d", unix.EPERM) {
		t.Errorf("keyctl under the Docker profile: %q (signal %v), want EPERM", r.out, r.signal)
	}
	if r := runHelper(t, "docker:exec", "/bin/true"); r.signal != 0 || r.out != "" {
		t.Errorf("/bin/true under the Docker profile: output %q, signal %v", r.out, r.signal)
	}
}

func TestInstallRejectsBadPrograms(t *testing.T) {
	if err := Program(nil).Install(); err == nil {
		t.Error("Install(empty) succeeded")
	}
	if err := make(Program, MaxInstructions+1).Install(); err == nil {
		t.Error("Install(too long) succeeded")
	}
}
