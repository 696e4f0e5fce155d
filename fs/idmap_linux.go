package fs

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap is the identity of a root caller's sandbox, for [OpenMounts].
type IDMap struct {
	// HostID is the host uid and gid the sandbox runs as: an unprivileged
	// id, never 0.
	HostID uint32
	// UID and GID are the sandbox user's ids inside the sandbox: its own
	// user namespace maps them (and nothing else) onto HostID.
	UID, GID uint32
	// SetIDRefused is true when the sandbox's commands cannot give a file
	// a set-id mode (tent's default seccomp profile refuses them). A rw
	// mount of a root-owned directory needs it: there the sandbox writes
	// as root, and a set-uid file it left would be host root's.
	SetIDRefused bool
	// Range, when above 1, maps ids 0 to Range-1 inside onto host ids
	// from HostID (a root caller's id range): every mount is then
	// idmapped so that an on-disk id k is k inside (Hostid+k on the
	// host), whoever owns its directory, rw ones included (a root-owned
	// one still needs SetIDRefused); UID and GID are only the sandbox
	// user's, among them.
	Range uint32
	// InitPID, when positive, is the sandbox's init: a child of this
	// process, not yet reaped (so its pid is its own). A ro or cow mount
	// whose directory's owner is exactly UID:GID is idmapped with the
	// init's user namespace rather than a new one.
	InitPID int
}

// UnsupportedMountError is a mount that [OpenMounts] cannot provide as
// asked on this host (not a malformed one): Reason says why and Fix what
// to do.
type UnsupportedMountError struct {
	Mount  Mount
	Reason string
	Fix    string
	// NoIDMap is set when the kernel or filesystem cannot idmap the
	// mount (rather than a refusal of tent's).
	NoIDMap bool
}

func (e *UnsupportedMountError) Error() string {
	return fmt.Sprintf("%s mount %s: %s (fix: %s)", e.Mount.Access, e.Mount.Source, e.Reason, e.Fix)
}

// invalidSourceError is a source that cannot be opened: it matches
// [ErrInvalidMount] without adding to the message.
type invalidSourceError struct{ err error }

func (e *invalidSourceError) Error() string   { return e.err.Error() }
func (e *invalidSourceError) Unwrap() []error { return []error{ErrInvalidMount, e.err} }

// nogroup is the on-disk group a rw mount's writes get instead of group
// root.
const nogroup = 65534

// OpenMounts opens the caller's mounts on the host, for a root caller
// whose sandbox (an unprivileged host id, id.HostID) could not reach them,
// and returns one detached mount (open_tree with OPEN_TREE_CLONE) per
// mount, in order, for [Step.FD]. Every mount is nosuid and nodev.
//
// Identity: the sandbox must never own files as host root, nor as any
// host id but the one it was given, and inside, files show the owners
// they have on the host as far as the sandbox's one id allows, so that
// git, tar and package managers behave as they do there. Every mount is
// idmapped with a dedicated user namespace that maps its directory's
// on-disk owner onto the sandbox's host identity, which the sandbox's own
// namespace maps to its user (id.UID, id.GID):
//
//   - rw: the directory's owner U and its group G map onto the sandbox's
//     host identity, and nothing else but, when U is not root and G is,
//     on-disk group root onto a gid the sandbox is not in
//     (rootGroupStandIn; such a directory's writes get group nogroup,
//     65534, rather than root). Inside, the directory and U's files are
//     the sandbox user's; what the sandbox creates is U:G on disk; files
//     of other owners are unmapped (nobody), so the sandbox can neither
//     write them, nor create files as, nor chown to any other id. A
//     root-owned directory is written as root, as docker and bwrap do
//     (the caller, root, chose to hand it over): what the sandbox creates
//     there is root:root on the host. That is safe to allow because what
//     would make a root-owned file dangerous cannot be made from inside:
//     set-id modes are denied by the default seccomp profile (and a write
//     clears them, the command lacking CAP_FSETID), file capabilities
//     need CAP_SETFCAP, which no command holds, and device nodes need
//     CAP_MKNOD in the host's user namespace (the mount is nodev inside
//     besides).
//   - ro, and a cow mount's lower layer: read-only, so nothing is ever
//     written through the mapping (a cow mount's changes go to the
//     overlay's upper layer, owned by the sandbox's host identity). The
//     directory's owner and group map onto the sandbox's, root included:
//     a root caller's root-owned repository is root's inside, as on the
//     host (git trusts it; tar and package managers see root:root), and
//     its owner may read what root may read in it, the tree the caller
//     chose to show; an alice-owned one is the sandbox user's. Other
//     owners show as nobody and are accessed through the "other"
//     permission bits. The mount stays nosuid and nodev, so owning files
//     there gives nothing else. Where the kernel or filesystem cannot
//     idmap a ro mount, it is bound read-only without (root's files then
//     show as nobody).
//
// What no idmapping controls: a file created in a set-gid directory takes
// the directory's on-disk group, root's included, as the host's own
// set-gid directories ask (never with a set-id bit: the default seccomp
// profile denies those modes, and the kernel strips S_ISGID for a
// creator outside the group).
//
// A ro or cow mount whose directory's owner is exactly id.UID:id.GID
// (root:root, for a root caller's default ids) is idmapped with the
// sandbox's own user namespace (id.InitPID's), which maps just that,
// rather than a new one.
//
// Errors: a source that cannot be opened (a symlink in its path, see
// [OpenSource]) wraps [ErrInvalidMount]; a rw mount the kernel or
// filesystem cannot idmap, or a root-owned one without
// id.SetIDRefused, is an [*UnsupportedMountError]. On error no descriptor is left open.
func OpenMounts(mounts []Mount, id IDMap) (fds []int, err error) {
	defer func() {
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = nil
		}
	}()
	userns := idmapNamespaces{hostID: id.HostID, initPID: id.InitPID, inside: idmapKey{uid: id.UID, gid: id.GID}, size: id.Range}
	defer userns.close()
	for _, m := range mounts {
		// Never through a symlink, which a sandbox may have planted in
		// the path (see OpenSource).
		src, err := OpenSource(m.Source)
		if err != nil {
			return fds, &invalidSourceError{fmt.Errorf("mount %s: %w", m.Source, err)}
		}
		fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		unix.Close(src)
		if err != nil {
			return fds, &invalidSourceError{fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("open_tree", err))}
		}
		fds = append(fds, fd)
		if err := setPropagation(fd, m.Slave); err != nil {
			return fds, fmt.Errorf("mount %s: %w", m.Source, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if m.Access != ReadWrite {
			// A ro mount, or a cow mount's lower layer (never written:
			// the overlay's upper layer takes the changes).
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fds, os.NewSyscallError("fstat", err)
		}
		if m.Access == ReadWrite && st.Uid == 0 && !id.SetIDRefused {
			return fds, &UnsupportedMountError{
				Mount: m,
				Reason: "it is owned by root, where the sandbox writes as root, and its seccomp profile (custom or unconfined) " +
					"does not refuse set-id modes: a set-uid file left there would run as host root",
				Fix: "use the default seccomp profile, mount it --cow and export the changes, or chown it to the user who should own what the sandbox writes",
			}
		}
		idmapped := attr
		var nsfd int
		if id.Range > 1 {
			nsfd, err = userns.getRange()
		} else {
			uid, gid, rootGroup := idmapOwner(m, st.Uid, st.Gid)
			nsfd, err = userns.get(uid, gid, rootGroup)
		}
		if err == nil {
			idmapped.Attr_set |= unix.MOUNT_ATTR_IDMAP
			idmapped.Userns_fd = uint64(nsfd)
			err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &idmapped)
			if err == nil {
				continue
			}
			err = os.NewSyscallError("mount_setattr", err)
		}
		if !m.Writable() {
			// The idmapping only shows owners as on the host. Where it
			// cannot be had (a filesystem or submount that cannot be
			// idmapped, no namespace for it), the mount is still bound
			// read-only (mount_setattr changed nothing), its files
			// showing the ids of the sandbox's own namespace: root's
			// as nobody.
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
				return fds, fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("mount_setattr", err))
			}
			continue
		}
		if idmapped.Attr_set&unix.MOUNT_ATTR_IDMAP != 0 && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM)) {
			// Not --cow: its lower layer needs the same idmapping.
			fix := "mount it --ro, or move it to a filesystem that can be idmapped (ext4, xfs, btrfs; tmpfs from Linux 6.3)"
			if st.Uid != 0 {
				fix = "run tent as the (non-root) user who owns the directory, " + fix
			}
			return fds, &UnsupportedMountError{
				Mount:   m,
				Reason:  "the kernel or filesystem cannot idmap this mount: " + err.Error(),
				Fix:     fix,
				NoIDMap: true,
			}
		}
		return fds, fmt.Errorf("mount %s: %w", m.Source, err)
	}
	return fds, nil
}

// idmapOwner returns the on-disk uid and gid that m's idmapping maps
// onto the sandbox's host identity, for a directory owned by uid:gid, and
// whether on-disk group root maps to rootGroupStandIn: what the sandbox
// writes through a rw mount lands on the host as these ids. A non-root
// owner's group root becomes nogroup (a user's directory left in group
// root by `chown alice dir` does not make the sandbox's files root's
// group); a root-owned directory stays root's. A ro mount and a cow
// mount's lower layer are read-only, so they map their owner whatever it
// is.
func idmapOwner(m Mount, uid, gid uint32) (mapUID, mapGID uint32, rootGroup bool) {
	if m.Access != ReadWrite {
		return uid, gid, false
	}
	if uid != 0 && gid == 0 {
		gid = nogroup
	}
	return uid, gid, gid != 0
}

// OpenBind opens m's source on the host, never through a symlink (see
// [OpenSource]), as a detached recursive clone for [Step.FD]: nosuid,
// nodev, read-only unless m is rw, and not idmapped, so that its files
// keep their on-disk owners (a sandbox's user namespace shows every
// owner but its own host id as nobody). A root caller uses it for a root
// that cannot be idmapped: the sandbox then writes only where its host
// identity may.
func OpenBind(m Mount) (int, error) {
	src, err := OpenSource(m.Source)
	if err != nil {
		return -1, &invalidSourceError{fmt.Errorf("mount %s: %w", m.Source, err)}
	}
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	unix.Close(src)
	if err != nil {
		return -1, &invalidSourceError{fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("open_tree", err))}
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE} // see MakePrivate
	if m.Slave {
		attr.Propagation = unix.MS_SLAVE
	}
	if !m.Writable() {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount %s: %w", m.Source, os.NewSyscallError("mount_setattr", err))
	}
	return fd, nil
}
