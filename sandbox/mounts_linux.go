package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

// openUserMounts opens the caller's mounts on the host, for a root caller
// whose sandbox (an unprivileged host id, unprivilegedHostID) could not
// reach them. Every mount is nosuid and nodev in the sandbox.
//
// Identity: the sandbox must never own files as host root, nor as any
// host id but the one it was given. A rw mount's directory owner is that
// id: the mount is idmapped with a dedicated user namespace that maps the
// directory's on-disk uid U, and its gid G (or nogroup, 65534, when G is
// 0), onto the sandbox's host identity, on-disk group root onto a gid
// the sandbox is not in (rootGroupStandIn), and nothing else. Inside,
// the directory and U's files are the sandbox user's (whatever Spec.User
// says); what the sandbox creates is U:G on disk; files of other owners
// are unmapped (nobody), so the sandbox can neither write them, nor
// create files as, nor chown to any other id. A rw mount of a root-owned
// directory is refused: its owner would be host root. A cow mount's
// lower layer is idmapped from whatever owns it, root included (0:0 then
// maps as the sandbox's own namespace used to map it), but read-only:
// nothing is written through it (the overlay's upper layer, owned by the
// sandbox's host identity, holds the changes).
//
// What no idmapping controls: a file created in a set-gid directory takes
// the directory's on-disk group, root's included, as the host's own
// set-gid directories ask (never with a set-id bit: the default seccomp
// profile denies those modes, and the kernel strips S_ISGID for a
// creator outside the group).
//
// The remaining parameters are the sandbox init's pid and its ids inside;
// the idmapping no longer depends on them.
func openUserMounts(mounts []fs.Mount, _ int, _, _ uint32) (fds []int, err error) {
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	var userns idmapNamespaces
	defer userns.close()
	for _, m := range mounts {
		// Never through a symlink, which a sandbox may have planted in
		// the path (see fs.OpenSource).
		src, err := fs.OpenSource(m.Source)
		if err != nil {
			return fds, invalid(fmt.Errorf("mount %s: %w", m.Source, err))
		}
		fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		unix.Close(src)
		if err != nil {
			return fds, invalid(fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("open_tree", err)))
		}
		fds = append(fds, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if !m.Writable() {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		} else {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return fds, os.NewSyscallError("fstat", err)
			}
			uid, gid, err := idmapOwner(m, st.Uid, st.Gid)
			if err != nil {
				return fds, err
			}
			nsfd, err := userns.get(uid, gid, m.Access != fs.CopyOnWrite)
			if err != nil {
				return fds, err
			}
			attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
			attr.Userns_fd = uint64(nsfd)
			if m.Access == fs.CopyOnWrite {
				// The overlay's lower layer: never written, but its owner
				// must be the sandbox user's to be copied up.
				attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
			}
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			if m.Writable() && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM)) {
				return fds, &UnsupportedError{Missing: []Missing{{
					Protection: string(m.Access) + " mount " + m.Source,
					Reason:     "the kernel or filesystem cannot idmap this mount: " + err.Error(),
					Fix:        "run tent as the (non-root) user who owns the directory, or mount it --ro",
				}}}
			}
			return fds, fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("mount_setattr", err))
		}
	}
	return fds, nil
}

// idmapOwner returns the on-disk uid and gid a writable mount of a
// directory owned by uid:gid maps onto the sandbox's host identity. A rw
// mount of a root-owned directory is refused, and group root becomes
// nogroup: what the sandbox writes through a rw mount lands on the host
// as these ids. A cow mount's lower layer is read-only, so it maps its
// owner whatever it is.
func idmapOwner(m fs.Mount, uid, gid uint32) (uint32, uint32, error) {
	if m.Access == fs.CopyOnWrite {
		return uid, gid, nil
	}
	if uid == 0 {
		return 0, 0, &UnsupportedError{Missing: []Missing{{
			Protection: string(m.Access) + " mount " + m.Source,
			Reason: "it is owned by root: as root, tent maps a rw mount's owner onto the sandbox's user, " +
				"and a sandbox never writes files as host root",
			Fix: fmt.Sprintf("chown the directory to the non-root user who should own what the sandbox writes (chown -R USER %s), "+
				"mount it --cow and export the changes, or run tent as that user", m.Source),
		}}}
	}
	if gid == 0 {
		gid = unprivilegedHostID
	}
	return uid, gid, nil
}
