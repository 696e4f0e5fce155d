//go:build linux

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// setIDModes are mode arguments around the S_ISUID and S_ISGID bits:
// every single bit of a umode_t, pairs with the set-id bits, typical
// modes, and values with bits above the 16 the kernel reads.
func setIDModes() []uint64 {
	modes := []uint64{0, 0o644, 0o755, 0o1777, 0o4755, 0o2755, 0o6755, 0o4000, 0o2000, 0o6000,
		unix.S_IFREG | 0o4755, unix.S_IFIFO | 0o2644, unix.S_IFCHR | 0o6000, 1<<32 | 0o4755, 1<<32 | 0o755,
		^uint64(0), ^uint64(0o6000), ^uint64(0o4000), ^uint64(0o2000)}
	for i := range 16 {
		modes = append(modes, 1<<i, 1<<i|0o4000, 1<<i|0o2000)
	}
	return modes
}

// TestDefaultDeniesSetIDModes checks that every call that sets a mode
// from an argument is EPERM exactly when the mode has S_ISUID or S_ISGID,
// and allowed otherwise.
func TestDefaultDeniesSetIDModes(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	nrs := map[string]uintptr{"chmod": unix.SYS_CHMOD, "fchmod": unix.SYS_FCHMOD, "fchmodat": unix.SYS_FCHMODAT,
		"fchmodat2": unix.SYS_FCHMODAT2, "creat": unix.SYS_CREAT, "mknod": unix.SYS_MKNOD, "mknodat": unix.SYS_MKNODAT}
	if len(nrs) != len(modeArgs) {
		t.Fatalf("%d syscall numbers for %d mode-setting calls", len(nrs), len(modeArgs))
	}
	for _, c := range modeArgs {
		nr, ok := nrs[c.name]
		if !ok {
			t.Fatalf("no syscall number for %s", c.name)
		}
		for _, mode := range setIDModes() {
			want := uint32(retAllow)
			if mode&0o6000 != 0 {
				want = retEPERM
			}
			d := seccompData{nr: int32(nr), arch: unix.AUDIT_ARCH_X86_64}
			d.args[c.mode] = mode
			if got, err := run(prog, d); err != nil || got != want {
				t.Errorf("%s(mode %#o) = %s %v, want %s", c.name, mode, verdictName(got), err, verdictName(want))
			}
		}
	}
}

// TestDefaultDeniesSetIDCreate checks open and openat: a set-id mode is
// EPERM when the flags create a file (O_CREAT, or O_TMPFILE, whose file
// can then be linked in), and ignored otherwise, as the kernel ignores
// the mode then. Flags are every single bit and every pair of bits of
// the int the kernel reads, and the same with high bits set.
func TestDefaultDeniesSetIDCreate(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	var flagsList []uint64
	for i := range 32 {
		for j := range 32 {
			flagsList = append(flagsList, 1<<i|1<<j, 1<<i|1<<j|0xffffffff00000000)
		}
	}
	flagsList = append(flagsList, 0, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, unix.O_RDWR|unix.O_TMPFILE,
		unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, unix.O_RDONLY|unix.O_DIRECTORY)
	modes := []uint64{0, 0o644, 0o755, 0o4755, 0o2755, 0o6755, 0o4000, 0o2000, 1<<32 | 0o4644, ^uint64(0o6000), ^uint64(0)}
	for _, c := range []struct {
		name        string
		nr          uintptr
		flags, mode int
	}{{"open", unix.SYS_OPEN, 1, 2}, {"openat", unix.SYS_OPENAT, 2, 3}} {
		for _, flags := range flagsList {
			for _, mode := range modes {
				want := uint32(retAllow)
				if flags&(unix.O_CREAT|unix.O_TMPFILE&^unix.O_DIRECTORY) != 0 && mode&0o6000 != 0 {
					want = retEPERM
				}
				d := seccompData{nr: int32(c.nr), arch: unix.AUDIT_ARCH_X86_64}
				d.args[c.flags], d.args[c.mode] = flags, mode
				if got, err := run(prog, d); err != nil || got != want {
					t.Fatalf("%s(flags %#x, mode %#o) = %s %v, want %s", c.name, flags, mode, verdictName(got), err, verdictName(want))
				}
			}
		}
	}
}

// TestDefaultSetIDNeighbours checks the calls around the set-id rules:
// openat2 (mode in memory) is ENOSYS so that callers fall back to openat;
// mkdir and mkdirat stay allowed with any mode, since the kernel keeps
// only the permission and sticky bits of mkdir's mode (a directory is
// set-gid only by inheriting it from its parent).
func TestDefaultSetIDNeighbours(t *testing.T) {
	amd64(t)
	prog := mustCompile(t, Default())
	checkCalls(t, prog, []call{
		{"openat2", unix.SYS_OPENAT2, []uint64{0, 0, 0, 24}, 0, retENOSYS},
		{"mkdir(02755)", unix.SYS_MKDIR, []uint64{0, 0o2755}, 0, retAllow},
		{"mkdirat(06777)", unix.SYS_MKDIRAT, []uint64{0, 0, 0o6777}, 0, retAllow},
		{"fchmodat(0755)", unix.SYS_FCHMODAT, []uint64{0, 0, 0o755}, 0, retAllow},
		{"fchmodat2(04755, AT_SYMLINK_NOFOLLOW)", unix.SYS_FCHMODAT2, []uint64{0, 0, 0o4755, unix.AT_SYMLINK_NOFOLLOW}, 0, retEPERM},
		{"creat(0644)", unix.SYS_CREAT, []uint64{0, 0o644}, 0, retAllow},
	})
}
