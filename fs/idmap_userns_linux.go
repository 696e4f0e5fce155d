package fs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// idmapKey is the on-disk owner a dedicated idmapping maps onto the
// sandbox's host identity, and whether group root maps to
// rootGroupStandIn.
type idmapKey struct {
	uid, gid  uint32
	rootGroup bool
}

// rootGroupStandIn is the host gid that on-disk group root maps to in a
// dedicated idmapping (65533: reserved, unused by Debian's policy). The
// kernel refuses every write into an inode whose uid or gid the mount
// leaves unmapped (EACCES), so without it the sandbox could not write in
// its own directory when that directory's group is root (alice:root, as
// `chown alice dir` leaves it). The sandbox is not in that group, cannot
// chgrp to it (its own user namespace does not map it) and never creates
// files with it (they get the gid its own maps to), so group root's
// permission bits give it nothing.
const rootGroupStandIn = 65533

// idmapNamespaces holds the user namespaces that idmap a root caller's
// writable mounts, one per on-disk owner, for one provisioning (a start
// or an attach). close releases them: a mount keeps its namespace alive
// on its own once mount_setattr has applied it.
type idmapNamespaces struct {
	fds map[idmapKey]int
	// hostID is the sandbox's host uid and gid, onto which every
	// namespace maps its owner.
	hostID uint32
	// initPID, when positive, is the sandbox's init (a child of this
	// process, not yet reaped, so the pid is its own), whose user
	// namespace maps exactly inside (its uid and gid, no root group) onto
	// hostID: get uses it for that key instead of creating a namespace (a
	// fork and exec of this binary, some milliseconds).
	initPID int
	inside  idmapKey
	// size, when above 1, is a range of ids from 0 mapped onto hostID
	// and up (getRange).
	size    uint32
	rangeFD int // getRange's namespace, 0 before it is made
}

// getRange returns an fd of a user namespace mapping ids 0 to size-1
// onto hostID and up, uids and gids alike: the sandbox's own (its
// init's, whose maps are exactly that) or a new one.
func (n *idmapNamespaces) getRange() (int, error) {
	if n.rangeFD > 0 {
		return n.rangeFD, nil
	}
	want := fmt.Sprintf("0 %d %d", n.hostID, n.size)
	if n.initPID > 0 {
		same := true
		for _, file := range []string{"uid_map", "gid_map"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", n.initPID, file))
			same = same && err == nil && strings.Join(strings.Fields(string(b)), " ") == want
		}
		if same {
			fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", n.initPID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				n.rangeFD = fd
				return fd, nil
			}
		}
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(n.hostID), Size: int(n.size)}}
	fd, err := newIDMapUserNS(m, m)
	if err != nil {
		return -1, err
	}
	n.rangeFD = fd
	return fd, nil
}

// sandboxUserNS opens the user namespace of the sandbox's init when its
// maps are the single lines "inside.uid hostID 1" and "inside.gid hostID
// 1", the same idmapping get would create; ok is false otherwise.
func (n *idmapNamespaces) sandboxUserNS() (fd int, ok bool) {
	for _, m := range []struct {
		file string
		id   uint32
	}{{"uid_map", n.inside.uid}, {"gid_map", n.inside.gid}} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", n.initPID, m.file))
		if err != nil || strings.Join(strings.Fields(string(b)), " ") != fmt.Sprintf("%d %d 1", m.id, n.hostID) {
			return -1, false
		}
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", n.initPID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	return fd, err == nil
}

// get returns an fd of a user namespace whose only mappings are uid →
// hostID, gid → hostID and, with rootGroup (and a non-zero gid), gid 0 →
// rootGroupStandIn; it creates it on first use. As a mount's idmapping
// it makes on-disk uid and gid the sandbox's host identity and nothing
// else: files the sandbox creates are uid:gid on disk; every other
// on-disk uid is unmapped, so the sandbox can neither create files as it
// nor chown to it, and the kernel refuses writes to the inodes it owns.
func (n *idmapNamespaces) get(uid, gid uint32, rootGroup bool) (int, error) {
	k := idmapKey{uid, gid, rootGroup}
	if fd, ok := n.fds[k]; ok {
		return fd, nil
	}
	if n.fds == nil {
		n.fds = map[idmapKey]int{}
	}
	if n.initPID > 0 && k == n.inside {
		if fd, ok := n.sandboxUserNS(); ok {
			n.fds[k] = fd
			return fd, nil
		}
	}
	host := int(n.hostID)
	gidMap := []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: host, Size: 1}}
	if rootGroup && gid != 0 {
		gidMap = append(gidMap, syscall.SysProcIDMap{ContainerID: 0, HostID: rootGroupStandIn, Size: 1})
	}
	fd, err := newIDMapUserNS([]syscall.SysProcIDMap{{ContainerID: int(uid), HostID: host, Size: 1}}, gidMap)
	if err != nil {
		return -1, err
	}
	n.fds[k] = fd
	return fd, nil
}

// close closes every namespace fd.
func (n *idmapNamespaces) close() {
	if n.rangeFD > 0 {
		unix.Close(n.rangeFD)
		n.rangeFD = 0
	}
	for k, fd := range n.fds {
		unix.Close(fd)
		delete(n.fds, k)
	}
}

// newIDMapUserNS creates a user namespace with these uid and gid maps and
// returns an O_CLOEXEC fd of it.
//
// A multithreaded Go process cannot unshare a user namespace, so a child
// is cloned into it: this binary re-executed with PTRACE_TRACEME, which
// stops it with SIGTRAP when its execve completes, before it runs a
// single instruction of the new program. Go's ForkExec writes the maps
// (and "deny" to setgroups) before letting the child exec, and returns
// only once the exec has succeeded; the namespace is then opened through
// /proc/PID/ns/user, and the child is killed and reaped before this
// returns, whatever happens. The child is this process's until reaped,
// so its pid cannot be reused under the kill.
func newIDMapUserNS(uidMap, gidMap []syscall.SysProcIDMap) (int, error) {
	// The tracer is the thread that forks; keep it while the tracee
	// lives, as package syscall asks of Ptrace.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"tent-idmap-userns"}, &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: uidMap,
			GidMappings: gidMap,
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.EPERM) {
			hint = " (is ptrace forbidden, kernel.yama.ptrace_scope=3?)"
		}
		return -1, fmt.Errorf("creating the user namespace of an idmapped mount (uid map %v, gid map %v): %w%s", uidMap, gidMap, err, hint)
	}
	defer killAndReap(pid)
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the user namespace of an idmapped mount: %w", os.NewSyscallError("open", err))
	}
	return fd, nil
}

// killAndReap kills a child of this process and waits until it is gone.
// A traced child's stops are reported to wait4 too, so it waits until an
// exit or a death by signal.
func killAndReap(pid int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || ws.Exited() || ws.Signaled() {
			return
		}
	}
}
