//go:build linux

package seccomp

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Verdicts as the kernel reads a filter's return value.
const (
	retAllow       = unix.SECCOMP_RET_ALLOW
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM       = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS      = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

func verdictName(v uint32) string {
	switch {
	case v == retAllow:
		return "ALLOW"
	case v == retKillProcess:
		return "KILL_PROCESS"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("ERRNO(%s)", unix.ErrnoName(unix.Errno(v&unix.SECCOMP_RET_DATA)))
	}
	return fmt.Sprintf("%#x", v)
}

// amd64 skips tests written in x86-64 syscall numbers and audit arches.
func amd64(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("verdict tables are written for x86-64, not %s", runtime.GOARCH)
	}
}

func mustCompile(t *testing.T, p *Profile) Program {
	t.Helper()
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) == 0 || len(prog) > MaxInstructions {
		t.Fatalf("program has %d instructions", len(prog))
	}
	return prog
}

type call struct {
	name string
	nr   uintptr
	args []uint64
	arch uint32 // 0: x86-64
	want uint32
}

func checkCalls(t *testing.T, prog Program, calls []call) {
	t.Helper()
	for _, c := range calls {
		d := seccompData{nr: int32(c.nr), arch: c.arch, ip: 0x401000}
		if d.arch == 0 {
			d.arch = unix.AUDIT_ARCH_X86_64
		}
		copy(d.args[:], c.args)
		got, err := run(prog, d)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if got != c.want {
			t.Errorf("%s: verdict %s, want %s", c.name, verdictName(got), verdictName(c.want))
		}
	}
}

func TestDefaultVerdicts(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	t.Logf("default profile: %d BPF instructions", len(prog))
	const sigchld = uint64(unix.SIGCHLD)
	checkCalls(t, prog, []call{
		{"read", unix.SYS_READ, nil, 0, retAllow},
		{"getpid", unix.SYS_GETPID, nil, 0, retAllow},
		{"execve", unix.SYS_EXECVE, nil, 0, retAllow},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, nil, 0, retEPERM},
		{"keyctl", unix.SYS_KEYCTL, nil, 0, retEPERM},
		{"open_tree", unix.SYS_OPEN_TREE, nil, 0, retEPERM},
		{"clone3", unix.SYS_CLONE3, nil, 0, retENOSYS},
		{"syscall 999", 999, nil, 0, retENOSYS},
		{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, 0, retEPERM},
		{"unshare(CLONE_NEWTIME)", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWTIME}, 0, retEPERM},
		{"unshare(CLONE_FILES|CLONE_NEWNET)", unix.SYS_UNSHARE, []uint64{unix.CLONE_FILES | unix.CLONE_NEWNET}, 0, retEPERM},
		{"unshare(CLONE_FILES)", unix.SYS_UNSHARE, []uint64{unix.CLONE_FILES}, 0, retAllow},
		{"clone(CLONE_NEWUSER|SIGCHLD)", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | sigchld}, 0, retEPERM},
		{"clone(CLONE_NEWPID|SIGCHLD)", unix.SYS_CLONE, []uint64{unix.CLONE_NEWPID | sigchld}, 0, retEPERM},
		{"clone(SIGCHLD)", unix.SYS_CLONE, []uint64{sigchld}, 0, retAllow},
		{"clone(thread)", unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES |
			unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
			unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, 0, retAllow},
		{"ioctl(TIOCSTI)", unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, 0, retEPERM},
		{"ioctl(TIOCSTI, high bits)", unix.SYS_IOCTL, []uint64{0, 0xffffffff00005412}, 0, retEPERM},
		{"ioctl(TIOCLINUX)", unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, 0, retEPERM},
		{"ioctl(TCGETS)", unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, 0, retAllow},
		{"ioctl(FIONREAD)", unix.SYS_IOCTL, []uint64{0, 0x541b}, 0, retAllow},
		{"ioctl(TIOCSTI+1)", unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI + 1}, 0, retAllow},
		{"ioctl(0x80086601)", unix.SYS_IOCTL, []uint64{0, 0x80086601}, 0, retAllow},
		{"socket(AF_VSOCK)", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(AF_VSOCK, high bits)", unix.SYS_SOCKET, []uint64{1<<32 | unix.AF_VSOCK, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(AF_ALG)", unix.SYS_SOCKET, []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, 0, retEPERM},
		{"socket(AF_PACKET)", unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_DGRAM}, 0, retEPERM},
		{"socket(AF_INET, SOCK_RAW|SOCK_CLOEXEC)", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC}, 0, retEPERM},
		{"socket(AF_INET6, SOCK_RAW|SOCK_NONBLOCK)", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, 0, retEPERM},
		{"socket(AF_INET, SOCK_STREAM)", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, 0, retAllow},
		{"socket(AF_INET6, SOCK_DGRAM|SOCK_CLOEXEC)", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC}, 0, retAllow},
		{"socket(AF_UNIX, SOCK_STREAM)", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, 0, retAllow},
		{"socket(AF_UNIX, SOCK_RAW)", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_RAW}, 0, retAllow},
		{"socket(AF_NETLINK, SOCK_RAW)", unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, 0, retAllow},
		{"socketpair(AF_UNIX)", unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, 0, retAllow},
		{"personality(0)", unix.SYS_PERSONALITY, []uint64{0}, 0, retAllow},
		{"personality(query)", unix.SYS_PERSONALITY, []uint64{0xffffffff}, 0, retAllow},
		{"personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, []uint64{0x0040000}, 0, retEPERM},
		{"personality(READ_IMPLIES_EXEC)", unix.SYS_PERSONALITY, []uint64{0x0400000}, 0, retEPERM},
		{"arch_prctl", unix.SYS_ARCH_PRCTL, nil, 0, retAllow},
		{"i386 getpid", 20, nil, unix.AUDIT_ARCH_I386, retKillProcess},
		{"i386 read", 3, nil, unix.AUDIT_ARCH_I386, retKillProcess},
		// libseccomp itself emits "nr >= 0x40000000 -> bad-arch action" in
		// the x86-64 section when x32 is not in the filter, so x32 calls
		// are killed without a rule of ours.
		{"x32 read", 0x40000000 | unix.SYS_READ, nil, 0, retKillProcess},
		{"x32 getpid", 0x40000000 | unix.SYS_GETPID, nil, 0, retKillProcess},
	})
}

// TestDefaultPersonality checks the personality rules bit by bit: the five
// safe values (low 32 bits; the kernel ignores the rest) are allowed, and
// every other value is EPERM, never the ENOSYS default.
func TestDefaultPersonality(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	safe := map[uint64]bool{0: true, 8: true, 0x20000: true, 0x20008: true, 0xffffffff: true}
	var values []uint64
	for i := range 64 {
		for j := range 64 {
			values = append(values, 1<<i|1<<j, 1<<i|1<<j|8, ^uint64(1<<i|1<<j))
		}
	}
	values = append(values, 0, 8, 0x20000, 0x20008, 0xffffffff, 1<<32|8, 0xfffffffe, 0x7fffffff)
	for _, v := range values {
		want := retEPERM
		if safe[v&0xffffffff] {
			want = retAllow
		}
		got, err := run(prog, seccompData{nr: unix.SYS_PERSONALITY, arch: unix.AUDIT_ARCH_X86_64, args: [6]uint64{v}})
		if err != nil || got != want {
			t.Fatalf("personality(%#x) = %s %v, want %s", v, verdictName(got), err, verdictName(want))
		}
	}
}

// TestDefaultNamedSyscalls checks every allowed and denied name libseccomp
// knows for this architecture: denied ones are explicit EPERM rules, not
// the ENOSYS default.
func TestDefaultNamedSyscalls(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	for _, list := range []struct {
		names string
		want  uint32
	}{{allowed, retAllow}, {denied, retEPERM}} {
		for _, name := range strings.Fields(list.names) {
			nr, err := libseccomp.GetSyscallFromName(name)
			if err != nil || nr < 0 {
				continue // unknown to libseccomp, or not an x86-64 syscall
			}
			got, err := run(prog, seccompData{nr: int32(nr), arch: unix.AUDIT_ARCH_X86_64})
			if err != nil || got != list.want {
				t.Errorf("%s (%d) = %s %v, want %s", name, nr, verdictName(got), err, verdictName(list.want))
			}
		}
	}
}

func TestDockerProfileVerdicts(t *testing.T) {
	amd64(t)
	p, err := Load(dockerProfile)
	if err != nil {
		t.Fatal(err)
	}
	prog := mustCompile(t, p)
	t.Logf("docker profile: %d BPF instructions", len(prog))
	checkCalls(t, prog, []call{
		{"read", unix.SYS_READ, nil, 0, retAllow},
		{"keyctl", unix.SYS_KEYCTL, nil, 0, retEPERM},
		{"mount (needs CAP_SYS_ADMIN)", unix.SYS_MOUNT, nil, 0, retEPERM},
		{"clone3 (ENOSYS without CAP_SYS_ADMIN)", unix.SYS_CLONE3, nil, 0, retENOSYS},
		{"clone(SIGCHLD)", unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, 0, retAllow},
		{"clone(CLONE_NEWUSER)", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, 0, retEPERM},
		{"ptrace (minKernel 4.8)", unix.SYS_PTRACE, nil, 0, retAllow},
		{"socket(AF_VSOCK)", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, 0, retEPERM},
		{"i386", 20, nil, unix.AUDIT_ARCH_I386, retKillProcess},
	})
}

// TestIncludesExcludes compiles the Docker profile for other environments.
func TestIncludesExcludes(t *testing.T) {
	amd64(t)
	p, err := Load(dockerProfile)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(tg target) Program {
		prog, err := compileFor(p, tg)
		if err != nil {
			t.Fatal(err)
		}
		return prog
	}
	old := compile(target{arch: "amd64", kernel: kernelVersion{4, 4}})
	checkCalls(t, old, []call{{"ptrace on 4.4", unix.SYS_PTRACE, nil, 0, retEPERM}})
	admin := compile(target{arch: "amd64", kernel: kernelVersion{6, 1}, caps: []string{"CAP_SYS_ADMIN"}})
	checkCalls(t, admin, []call{
		{"mount with CAP_SYS_ADMIN", unix.SYS_MOUNT, nil, 0, retAllow},
		{"clone(CLONE_NEWUSER) with CAP_SYS_ADMIN", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, 0, retAllow},
	})
	s390 := compile(target{arch: "s390x", kernel: kernelVersion{6, 1}})
	checkCalls(t, s390, []call{
		{"arch_prctl excluded off amd64", unix.SYS_ARCH_PRCTL, nil, 0, retEPERM},
		{"clone checks arg 1 on s390", unix.SYS_CLONE, []uint64{0, unix.CLONE_NEWUSER}, 0, retEPERM},
	})
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *Profile
		want string
	}{
		{"notify", &Profile{DefaultAction: ActAllow, Syscalls: []Syscall{{Names: []string{"read"}, Action: ActNotify}}},
			"syscalls[0].action: SCMP_ACT_NOTIFY is not supported"},
		{"bad op", &Profile{DefaultAction: ActAllow, Syscalls: []Syscall{{Names: []string{"read"}, Action: ActErrno,
			Args: []Arg{{Index: 0, Op: "SCMP_CMP_BAD"}}}}}, "syscalls[0].args[0].op"},
		{"empty", &Profile{}, "defaultAction: missing"},
	} {
		if _, err := Compile(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Compile error = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestCompileRuleForms covers unknown names, rules equal to the default,
// and repeated argument indexes (alternatives, as in runc).
func TestCompileRuleForms(t *testing.T) {
	amd64(t)
	p := &Profile{DefaultAction: ActErrno, Syscalls: []Syscall{
		{Names: []string{"no_such_syscall", "read"}, Action: ActAllow},
		{Name: "write", Action: ActErrno}, // same as the default: skipped
		{Names: []string{"kill"}, Action: ActAllow, Args: []Arg{
			{Index: 1, Value: 0, Op: OpEqualTo}, {Index: 1, Value: 9, Op: OpEqualTo}}},
		{Names: []string{"tkill"}, Action: ActKillProcess, Args: []Arg{
			{Index: 0, Value: 1, Op: OpEqualTo}, {Index: 1, Value: 9, Op: OpEqualTo}}},
		{Names: []string{"getpid"}, Action: ActTrace, ErrnoRet: errnoPtr(7)},
		{Names: []string{"gettid"}, Action: ActLog},
		{Names: []string{"getuid"}, Action: ActTrap},
		{Names: []string{"getgid"}, Action: ActKill},
	}}
	prog := mustCompile(t, p)
	checkCalls(t, prog, []call{
		{"read", unix.SYS_READ, nil, 0, retAllow},
		{"write", unix.SYS_WRITE, nil, 0, retEPERM},
		{"kill(x, 0)", unix.SYS_KILL, []uint64{5, 0}, 0, retAllow},
		{"kill(x, 9)", unix.SYS_KILL, []uint64{5, 9}, 0, retAllow},
		{"kill(x, 15)", unix.SYS_KILL, []uint64{5, 15}, 0, retEPERM},
		{"tkill(1, 9)", unix.SYS_TKILL, []uint64{1, 9}, 0, retKillProcess},
		{"tkill(2, 9)", unix.SYS_TKILL, []uint64{2, 9}, 0, retEPERM},
		{"getpid", unix.SYS_GETPID, nil, 0, unix.SECCOMP_RET_TRACE | 7},
		{"gettid", unix.SYS_GETTID, nil, 0, unix.SECCOMP_RET_LOG},
		{"getuid", unix.SYS_GETUID, nil, 0, unix.SECCOMP_RET_TRAP},
		{"getgid", unix.SYS_GETGID, nil, 0, unix.SECCOMP_RET_KILL_THREAD},
	})
}

func TestMarshalRoundTrip(t *testing.T) {
	prog := mustCompile(t, Default())
	b := prog.Marshal()
	if len(b) != 8*len(prog) {
		t.Fatalf("Marshal: %d bytes for %d instructions", len(b), len(prog))
	}
	back, err := UnmarshalProgram(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(prog) {
		t.Fatalf("round trip: %d instructions, want %d", len(back), len(prog))
	}
	for i := range prog {
		if back[i] != prog[i] {
			t.Fatalf("instruction %d: %+v, want %+v", i, back[i], prog[i])
		}
	}
	// The encoding is fixed little endian: RET ALLOW is 06 00 00 00 00 00 ff 7f.
	one := Program{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	if got := one.Marshal(); !bytes.Equal(got, []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}) {
		t.Errorf("Marshal(ret allow) = % x", got)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 8*(MaxInstructions+1))} {
		if _, err := UnmarshalProgram(bad); err == nil {
			t.Errorf("UnmarshalProgram(%d bytes) succeeded", len(bad))
		}
	}
}
