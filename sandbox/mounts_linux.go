package sandbox

import (
	"errors"

	"github.com/tent-sandbox/tent/fs"
)

// openUserMounts opens the caller's mounts on the host, idmapped, for a
// root caller whose sandbox (unprivilegedHostID) could not reach them:
// see [fs.OpenMounts]. initPID is the sandbox's init and uid, gid its
// ids inside. A source that cannot be opened is an [ErrInvalidSpec]; a
// mount the host cannot idmap as asked, an [UnsupportedError].
func openUserMounts(mounts []fs.Mount, initPID int, uid, gid uint32) ([]int, error) {
	fds, err := fs.OpenMounts(mounts, fs.IDMap{HostID: unprivilegedHostID, UID: uid, GID: gid, InitPID: initPID})
	var ue *fs.UnsupportedMountError
	switch {
	case err == nil:
		return fds, nil
	case errors.As(err, &ue):
		return nil, &UnsupportedError{Missing: []Missing{{
			Protection: string(ue.Mount.Access) + " mount " + ue.Mount.Source,
			Reason:     ue.Reason,
			Fix:        ue.Fix,
		}}}
	case errors.Is(err, fs.ErrInvalidMount):
		return nil, invalid(err)
	}
	return nil, err
}
