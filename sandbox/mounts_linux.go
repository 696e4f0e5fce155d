package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

// openUserMounts opens the caller's mounts on the host, idmapped, for a
// root caller whose sandbox (unprivilegedHostID) could not reach them:
// see [fs.OpenMounts]. initPID is the sandbox's init. A source that cannot be opened is an [ErrInvalidSpec]; a
// mount the host cannot idmap as asked, an [UnsupportedError].
func openUserMounts(mounts []fs.Mount, initPID int, p *plan) ([]int, error) {
	fds, err := fs.OpenMounts(mounts, p.idMap(initPID))
	if err != nil {
		return nil, mountError(err)
	}
	return fds, nil
}

// idMap is the identity a root caller's mounts are idmapped onto (see
// [fs.IDMap]): tent's one unprivileged host id, or the sandbox's id range.
func (p *plan) idMap(initPID int) fs.IDMap {
	id := fs.IDMap{HostID: unprivilegedHostID, UID: p.uid, GID: p.gid, InitPID: initPID, SetIDRefused: p.defaultSeccomp}
	if r := p.idRange; r != nil {
		id.HostID, id.Range = r.Host, r.Size
	}
	return id
}

// mountError turns an error of fs.OpenMounts into the sandbox's.
func mountError(err error) error {
	var ue *fs.UnsupportedMountError
	switch {
	case errors.As(err, &ue):
		return &UnsupportedError{Missing: []Missing{{
			Protection: string(ue.Mount.Access) + " mount " + ue.Mount.Source,
			Reason:     ue.Reason,
			Fix:        ue.Fix,
		}}}
	case errors.Is(err, fs.ErrInvalidMount):
		return invalid(err)
	}
	return err
}

// withGitGuards returns mounts followed by the mounts that keep the git
// control files of the repositories in its rw mounts read-only (see
// [Spec.GitWritable] and fs.FindGitDirs), unless writable; how many git
// directories they guard; and the targets of the rw mounts whose search
// stopped at its bound. existing are every mount of the sandbox (mounts
// among them): a repository beneath another mount's target is that
// mount's, not guarded through this one.
func withGitGuards(mounts []fs.Mount, writable bool, existing []fs.Mount) (all []fs.Mount, guarded int, partial []string, err error) {
	all = mounts
	if writable {
		return all, 0, nil, nil
	}
	for _, m := range mounts {
		if m.Access != fs.ReadWrite {
			continue
		}
		var skip []string
		for _, o := range existing {
			if o.Target != m.Target && strings.HasPrefix(o.Target, strings.TrimSuffix(m.Target, "/")+"/") {
				skip = append(skip, o.Target)
			}
		}
		guards, complete := fs.FindGitDirs(m, skip)
		if !complete {
			partial = append(partial, m.Target)
		}
		extra, err := fs.GitGuardMounts(guards)
		if err != nil {
			return nil, 0, nil, err
		}
		// A caller's own mount at a guard's target (--ro X:/w/.git/hooks)
		// is the caller's choice, and stays.
		extra = slices.DeleteFunc(extra, func(g fs.Mount) bool {
			return slices.ContainsFunc(existing, func(o fs.Mount) bool { return o.Target == g.Target })
		})
		if len(extra) > 0 && len(all) == len(mounts) {
			all = slices.Clone(mounts)
		}
		for _, g := range guards {
			if g.Control {
				guarded++
			}
		}
		all = append(all, extra...)
	}
	return all, guarded, partial, nil
}

// openRoot opens a root caller's Spec.Root on the host: idmapped as a rw
// mount is (root-owned files stay root's inside), or, where the kernel
// or filesystem cannot idmap it (an overlay, such as containerd's
// rootfs) and tent's default seccomp profile refuses set-id modes, as a
// plain bind: the sandbox then writes only where its host identity
// (unprivilegedHostID) may, and sees root's files as nobody's. That is
// reported.
func (p *plan) openRoot(initPID int) (int, error) {
	if p.idRange != nil && p.rootInRange() {
		return p.bindRootInRange()
	}
	fds, err := fs.OpenMounts([]fs.Mount{*p.root}, p.idMap(initPID))
	var ue *fs.UnsupportedMountError
	switch {
	case err == nil:
		return fds[0], nil
	case errors.As(err, &ue) && ue.NoIDMap && p.idRange != nil:
		fd, oerr := p.openOverlayRoot(initPID)
		if oerr == nil {
			return fd, nil
		}
		if errors.Is(oerr, fs.ErrLayersInRange) {
			return p.bindRootInRange()
		}
		if !p.defaultSeccomp {
			return -1, mountError(err)
		}
		fd, err = fs.OpenBind(*p.root)
		if err != nil {
			return -1, invalid(err)
		}
		p.report.add("root idmapping", Absent, ue.Reason+"; nor rebuilt over idmapped layers: "+oerr.Error()+": its files keep their owners, root's showing as nobody, and the sandbox writes only where its host identity may")
		return fd, nil
	case errors.As(err, &ue) && ue.NoIDMap && p.defaultSeccomp:
		fd, err := fs.OpenBind(*p.root)
		if err != nil {
			return -1, invalid(err)
		}
		p.report.add("root idmapping", Absent, ue.Reason+": its files keep their owners, root's showing as nobody, and the sandbox writes only where its host identity may")
		return fd, nil
	}
	return -1, mountError(err)
}

// openOverlayRoot rebuilds an overlay Root (a container image's) over
// idmapped lower layers with the sandbox's own user namespace (its id
// range: see [fs.OpenIDMappedOverlay]), read-only when the root is.
func (p *plan) openOverlayRoot(initPID int) (int, error) {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", initPID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open user namespace", err)
	}
	defer unix.Close(ns)
	fd, err := fs.OpenIDMappedOverlay(p.root.Source, ns, p.idRange.Host, p.idRange.Host)
	if err != nil {
		return -1, err
	}
	if !p.root.Writable() {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("mount_setattr", err)
		}
	}
	p.report.add("root idmapping", Enforced, "an overlay, rebuilt over idmapped lower layers: its files keep their owners inside")
	return fd, nil
}

// rootInRange reports whether a root that is not an overlay is in the id
// range's host ids already (its directory owned by the range's root,
// which the sandbox cannot make so: what it writes through the idmapped
// root is on disk under ids 0 to Size-1). An overlay's own root is its
// upper layer's, which tent gives the range's root: fs.OpenIDMappedOverlay
// checks its image layers instead (fs.ErrLayersInRange).
func (p *plan) rootInRange() bool {
	fd, err := fs.OpenSource(p.root.Source)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if unix.Fstatfs(fd, &sfs) != nil || sfs.Type == unix.OVERLAYFS_SUPER_MAGIC || unix.Fstat(fd, &st) != nil {
		return false
	}
	return st.Uid == p.idRange.Host && st.Gid == p.idRange.Host
}

// bindRootInRange binds a root whose files are in the id range's host ids
// already (containerd's own shifted snapshot of a user-namespaced pod) as
// it is: idmapping it would shift them twice.
func (p *plan) bindRootInRange() (int, error) {
	fd, err := fs.OpenBind(*p.root)
	if err != nil {
		return -1, invalid(err)
	}
	p.report.add("root idmapping", Enforced, "the root's files are in the id range's host ids already: bound as they are")
	return fd, nil
}
