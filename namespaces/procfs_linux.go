package namespaces

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// procfsHelperArg0 is the argv[0] of the procfs helper: the host binary
// again, cloned into a pod's pid namespace (Options.PIDNamespace) from a
// thread that joined it, with the host's credentials and every other
// namespace of the host. A procfs shows the pid namespace of the process
// that makes it, and only a process capable in the user namespace that
// owns that pid namespace (the pod's sandbox container's) may make it:
// the init, in a user namespace of its own, can do neither. The helper
// makes the mount (fsopen, fsmount: nosuid, nodev, noexec), sends it on
// fd 3 and exits; it runs no code of the pod's and lives a few
// milliseconds.
const procfsHelperArg0 = "tent-procfs"

// runProcfsHelper is the helper's main.
func runProcfsHelper() int {
	fd, err := newMount("proc", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		// The error's text goes back instead of a descriptor.
		_ = unix.Sendmsg(3, []byte(err.Error()), nil, nil, 0)
		return 1
	}
	if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
		return 1
	}
	return 0
}

// procfsFromHelper clones the procfs helper from this thread (whose
// children are in the pod's pid namespace) and returns its mount.
func procfsFromHelper(ctx context.Context) (int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socketpair", err)
	}
	// Non-blocking, so that the runtime's poller bounds the wait.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return -1, os.NewSyscallError("fcntl", err)
	}
	mine := os.NewFile(uintptr(pair[0]), "tent-procfs")
	defer mine.Close()
	theirs := os.NewFile(uintptr(pair[1]), "tent-procfs-helper")
	var stderr bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{procfsHelperArg0}, Env: []string{"GOMAXPROCS=1"}, ExtraFiles: []*os.File{theirs},
		// No parent-death signal: its parent is outside its pid
		// namespace, where getppid gives 0, and Go's fork takes that for
		// a dead parent (the child kills itself). It lives milliseconds.
		Stderr: &stderr}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return -1, fmt.Errorf("starting the procfs helper: %w", err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Wait()
		}
	}()
	// Bounded: the helper does three system calls.
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := mine.SetReadDeadline(deadline); err != nil {
		_ = cmd.Process.Kill()
		return -1, err
	}
	raw, err := mine.SyscallConn()
	if err != nil {
		_ = cmd.Process.Kill()
		return -1, err
	}
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return -1, fmt.Errorf("the procfs helper: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err == nil && len(msgs) == 1 {
		fds, ferr := unix.ParseUnixRights(&msgs[0])
		if ferr == nil && len(fds) == 1 {
			return fds[0], nil
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n > 1 {
		return -1, fmt.Errorf("the procfs helper: %s", buf[:n])
	}
	werr := cmd.Wait()
	return -1, fmt.Errorf("the procfs helper sent no mount (%v): %q", werr, bytes.TrimSpace(stderr.Bytes()))
}

// Sysfs makes a sysfs for the network namespace of pid (a sandbox's init:
// its own namespace, a pod's it joined, or the host's it shares), as a
// detached mount, read-only, nosuid, nodev and noexec, for the init's
// /sys (fs.Plan.AddSysfs): a sysfs shows the network devices of the
// namespace of the process that makes it, and only a process capable in
// the user namespace that owns that network namespace may make it, which
// the init is not for a pod's (the host's user namespace owns it). It is
// made on a thread that joined that namespace (onThreadIn: a thread's
// network namespace is its own, so no helper process is needed). Needs
// root.
func Sysfs(pid int) (int, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return -1, fmt.Errorf("sysfs: the sandbox's network namespace: %w", err)
	}
	defer ns.Close()
	fd := -1
	err = onThreadIn(ns, unix.CLONE_NEWNET, func() (err error) {
		fd, err = newMount("sysfs", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		return err
	}, func() { unix.Close(fd) })
	if err != nil {
		return -1, fmt.Errorf("sysfs: %w", err)
	}
	return fd, nil
}

// newMount makes a filesystem of type fstype with no options and returns
// it as a detached mount with attrs.
func newMount(fstype string, attrs int) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("fsopen "+fstype, err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, os.NewSyscallError("fsconfig create "+fstype, err)
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return -1, os.NewSyscallError("fsmount "+fstype, err)
	}
	return fd, nil
}
