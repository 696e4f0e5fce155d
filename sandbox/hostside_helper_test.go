//go:build linux

package sandbox_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// The attacks of hostside_identity_test.go are made by this test binary
// itself, exec'd inside the sandbox with hostsideEnv set: init runs
// before TestMain (and before sandbox.Init, which a command never needs),
// makes the exact syscalls and prints one "NAME RESULT" line each, RESULT
// being "ok" or the errno's name. The binary's directory is mounted
// read-only at hostsideDir.
const (
	hostsideEnv = "TENT_HOSTSIDE_HELPER"
	hostsideDir = "/opt/hostside"
)

// security.capability's magic_etc (linux/capability.h).
const (
	vfsCapRevision2      = 0x02000000
	vfsCapRevision3      = 0x03000000
	vfsCapFlagsEffective = 0x000001
)

func init() {
	if op := os.Getenv(hostsideEnv); op != "" {
		os.Exit(hostsideHelper(op, os.Args[1:]))
	}
}

// capSetIDv2 is a version 2 security.capability value: CAP_SETGID and
// CAP_SETUID permitted and effective, as `setcap cap_setuid,cap_setgid+ep`
// writes it.
var capSetIDv2 = func() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], vfsCapRevision2|vfsCapFlagsEffective)
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_SETGID|1<<unix.CAP_SETUID)
	return b
}()

// setIDAttempts are the helper's "setid DIR" operations with the result
// each must have under the default profile. The controls (ok) show that
// the directory is writable and modes without set-id bits still work, so
// an EPERM is the filter's and nothing else's.
var setIDAttempts = []struct{ name, want string }{
	{"control-open-creat-0755", "ok"},
	{"control-chmod-0750", "ok"},
	{"chmod-06755", "EPERM"},
	{"chmod-04755", "EPERM"},
	{"chmod-02755", "EPERM"},
	{"fchmod-04755", "EPERM"},
	{"fchmodat-02755", "EPERM"},
	{"fchmodat2-04755", "EPERM"},
	{"open-creat-04755", "EPERM"},
	{"openat-creat-02755", "EPERM"},
	{"creat-06755", "EPERM"},
	{"openat-tmpfile-04755", "EPERM"},
	{"mknodat-reg-04755", "EPERM"},
	{"mknod-fifo-02644", "EPERM"},
	{"mknod-chr-1-3", "EPERM"},
	{"mknodat-blk-8-0", "EPERM"},
	{"openat2-creat-04755", "ENOSYS"},
	{"mkdir-02755", "ok"},
	{"setxattr-security.capability", "EPERM"},
	{"os.Root-create", "ok"},
}

// hostsideHelper runs inside a sandbox.
func hostsideHelper(op string, args []string) int {
	result := func(name string, err error) {
		var errno syscall.Errno
		switch {
		case err == nil:
			fmt.Println(name, "ok")
		case errors.As(err, &errno):
			fmt.Println(name, unix.ErrnoName(errno))
		default:
			fmt.Println(name, err)
		}
	}
	switch op {
	case "setid": // setid DIR
		for _, a := range setIDAttempts {
			result(a.name, trySetID(args[0], a.name))
		}
	case "setcap": // setcap FILE: write security.capability from a nested user namespace
		cmd := exec.Command("/proc/self/exe", args[0])
		cmd.Env = []string{hostsideEnv + "=setcap-inner"}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			result("userns", err)
			return 0
		}
		fmt.Print(string(out))
	case "setcap-inner":
		result("setxattr-security.capability", unix.Setxattr(args[0], "security.capability", capSetIDv2, 0))
	default:
		fmt.Fprintln(os.Stderr, "unknown helper operation", op)
		return 2
	}
	return 0
}

// trySetID makes the attempt name (one of setIDAttempts) in dir.
func trySetID(dir, name string) error {
	errno := func(e syscall.Errno) error {
		if e == 0 {
			return nil
		}
		return e
	}
	p := func(name string) *byte { b, _ := unix.BytePtrFromString(filepath.Join(dir, name)); return b }
	ptr := func(b *byte) uintptr { return uintptr(unsafe.Pointer(b)) }
	atFDCWD := uintptr(0xffffffffffffff9c) // AT_FDCWD, -100
	ctl, victim := filepath.Join(dir, "ctl"), filepath.Join(dir, "victim")
	var err error
	switch name {
	case "control-open-creat-0755":
		var fd int
		if fd, err = unix.Open(ctl, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o755); err == nil {
			unix.Close(fd)
		}
		if err == nil {
			err = os.WriteFile(victim, []byte("#!/bin/sh\nid\n"), 0o755)
		}
	case "control-chmod-0750":
		err = unix.Chmod(ctl, 0o750)
	case "chmod-06755":
		err = unix.Chmod(victim, 0o6755)
	case "chmod-04755":
		err = unix.Chmod(victim, 0o4755)
	case "chmod-02755":
		err = unix.Chmod(victim, 0o2755)
	case "fchmod-04755":
		var fd int
		if fd, err = unix.Open(victim, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			err = unix.Fchmod(fd, 0o4755)
			unix.Close(fd)
		}
	case "fchmodat-02755":
		_, _, e := unix.Syscall(unix.SYS_FCHMODAT, atFDCWD, ptr(p("victim")), 0o2755)
		err = errno(e)
	case "fchmodat2-04755":
		_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, atFDCWD, ptr(p("victim")), 0o4755, 0, 0, 0)
		err = errno(e)
	case "open-creat-04755":
		r, _, e := unix.Syscall(unix.SYS_OPEN, ptr(p("o1")), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o4755)
		if err = errno(e); err == nil {
			unix.Close(int(r))
		}
	case "openat-creat-02755":
		r, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(p("o2")), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o2755, 0, 0)
		if err = errno(e); err == nil {
			unix.Close(int(r))
		}
	case "creat-06755":
		r, _, e := unix.Syscall(unix.SYS_CREAT, ptr(p("o3")), 0o6755, 0)
		if err = errno(e); err == nil {
			unix.Close(int(r))
		}
	case "openat-tmpfile-04755":
		d, _ := unix.BytePtrFromString(dir)
		r, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(d), unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o4755, 0, 0)
		if err = errno(e); err == nil {
			unix.Close(int(r))
		}
	case "mknodat-reg-04755":
		_, _, e := unix.Syscall6(unix.SYS_MKNODAT, atFDCWD, ptr(p("m1")), unix.S_IFREG|0o4755, 0, 0, 0)
		err = errno(e)
	case "mknod-fifo-02644":
		_, _, e := unix.Syscall(unix.SYS_MKNOD, ptr(p("m2")), unix.S_IFIFO|0o2644, 0)
		err = errno(e)
	case "mknod-chr-1-3": // /dev/null's numbers
		err = unix.Mknod(filepath.Join(dir, "m3"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	case "mknodat-blk-8-0": // /dev/sda's
		err = unix.Mknodat(unix.AT_FDCWD, filepath.Join(dir, "m4"), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0)))
	case "openat2-creat-04755":
		how := unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC, Mode: 0o4755}
		r, _, e := unix.Syscall6(unix.SYS_OPENAT2, atFDCWD, ptr(p("o4")), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		if err = errno(e); err == nil {
			unix.Close(int(r))
		}
	case "mkdir-02755":
		err = unix.Mkdir(filepath.Join(dir, "dir"), 0o2755)
	case "setxattr-security.capability":
		err = unix.Setxattr(victim, "security.capability", capSetIDv2, 0)
	case "os.Root-create":
		var root *os.Root
		if root, err = os.OpenRoot(dir); err == nil {
			err = root.WriteFile("viaroot", []byte("written through os.Root\n"), 0o644)
			root.Close()
		}
	default:
		err = fmt.Errorf("unknown attempt %q", name)
	}
	return err
}

// withHostsideHelper returns spec with this test binary's directory
// mounted read-only at hostsideDir, and the helper's path inside.
func withHostsideHelper(t *testing.T, spec sandbox.Spec) (sandbox.Spec, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: filepath.Dir(exe), Target: hostsideDir, Access: sandbox.ReadOnly})
	return spec, hostsideDir + "/" + filepath.Base(exe)
}

// helperResults parses the helper's "NAME RESULT" lines.
func helperResults(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, res, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("helper printed %q", sc.Text())
		}
		got[name] = res
	}
	return got
}
