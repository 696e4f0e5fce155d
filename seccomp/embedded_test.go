//go:build linux && amd64

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The precompiled default must decide every syscall (and the arguments
// the profile inspects) exactly as a fresh compilation of Default does.
func TestEmbeddedDefaultIsCurrent(t *testing.T) {
	embedded, err := DefaultProgram()
	if err != nil {
		t.Fatal(err)
	}
	sameVerdicts(t, "default", embedded, mustCompile(t, Default()))
}

// Each precompiled guard must decide as a fresh compilation of its
// GuardProfile does.
func TestEmbeddedGuardsAreCurrent(t *testing.T) {
	for _, g := range []Guard{{}, {NoNetwork: true}, {NoIPC: true}, {NoNetwork: true, NoIPC: true}} {
		embedded, err := GuardProgram(g)
		if err != nil {
			t.Fatalf("%+v: %v", g, err)
		}
		sameVerdicts(t, guardFile(g), embedded, mustCompile(t, GuardProfile(g)))
	}
}

// sameVerdicts runs every syscall number below 1024 of the x86-64 and
// i386 ABIs, with arguments the built-in profiles inspect, through both
// programs and fails at the first difference; an x32 call must kill.
func sameVerdicts(t *testing.T, name string, embedded, fresh Program) {
	t.Helper()
	interesting := []uint64{0, 1, 2, 3, 5, 17, 38, 40, 0x5412, 0x541c, 0xffffffff00005412, 0x8, 0x20000, 0xffffffff,
		unix.CLONE_NEWUSER, unix.CLONE_NEWNS | uint64(unix.SIGCHLD), uint64(unix.SIGCHLD), unix.CLONE_FILES,
		// modes and open flags: 0o755 and 0o4755 include O_CREAT (0o100)
		0o755, 0o4755, 0o2755, 0o6000, 0o4000, unix.O_TMPFILE | 0o2000, 0o4000 | 1<<32,
		// socket families with high bits set (the guard reads 32 of them)
		1<<32 | unix.AF_UNIX, 1<<32 | unix.AF_INET}
	for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386} {
		for nr := int32(0); nr < 1024; nr++ {
			for _, arg := range interesting {
				d := seccompData{nr: nr, arch: arch, args: [6]uint64{arg, arg, arg, arg, arg, arg}}
				a, errA := run(embedded, d)
				b, errB := run(fresh, d)
				if errA != nil || errB != nil || a != b {
					t.Fatalf("%s: syscall %d arch %#x args %#x: embedded %s (%v), fresh %s (%v): run `go generate ./seccomp`",
						name, nr, arch, arg, verdictName(a), errA, verdictName(b), errB)
				}
			}
		}
	}
	nr := int32(unix.SYS_CLONE3) | 0x40000000 // x32
	if v, _ := run(embedded, seccompData{nr: nr, arch: unix.AUDIT_ARCH_X86_64}); v != unix.SECCOMP_RET_KILL_PROCESS {
		t.Errorf("%s: x32 syscall: %s, want kill", name, verdictName(v))
	}
}
