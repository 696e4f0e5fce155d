//go:build linux

package fs

import "golang.org/x/sys/unix"

// Landlock filesystem rights, as the kernel numbers them.
const (
	llExecute   = unix.LANDLOCK_ACCESS_FS_EXECUTE
	llWriteFile = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	llReadFile  = unix.LANDLOCK_ACCESS_FS_READ_FILE
	llReadDir   = unix.LANDLOCK_ACCESS_FS_READ_DIR
	llRefer     = unix.LANDLOCK_ACCESS_FS_REFER
	llTruncate  = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llIoctlDev  = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	// llABI1 is every right of Landlock ABI 1 (execute ... make_sym).
	llABI1 = 1<<13 - 1

	llReadExec = llExecute | llReadFile | llReadDir
	llDevice   = llReadFile | llWriteFile | llTruncate | llIoctlDev
)

// MaxLandlockABI is the highest Landlock ABI whose features tent knows:
// ABI 2 adds refer, 3 truncate, 4 TCP rules, 5 ioctl on devices, 6
// scoping of abstract unix sockets and signals, 7 audit-log flags.
const MaxLandlockABI = 7

// HandledAccess returns the filesystem rights Landlock ABI abi can
// restrict; everything in it is denied unless a rule grants it.
func HandledAccess(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	access := uint64(llABI1)
	if abi >= 2 {
		access |= llRefer
	}
	if abi >= 3 {
		access |= llTruncate
	}
	if abi >= 5 {
		access |= llIoctlDev
	}
	return access
}

// Scoped returns the scopes (abstract unix sockets, signals) ABI abi can
// restrict: both from ABI 6, none before.
func Scoped(abi int) uint64 {
	if abi >= 6 {
		return unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return 0
}

// LandlockRules mirrors a plan: read and execute everywhere visible;
// every right beneath writable targets (rw binds, /tmp, $HOME, /dev/shm);
// read, write and ioctl on the bound device nodes and /dev/pts. With
// Plan.WritableRoot, every right but ioctl on devices beneath "/": the
// mounts' own flags then decide (the host's system directories, /dev and
// read-only mounts are read-only mounts: EROFS), and the kernel's
// permissions decide in /proc.
func LandlockRules(p *Plan) []LandlockRule {
	rules := []LandlockRule{{Path: "/", Access: llReadExec}}
	if p.WritableRoot {
		rules[0].Access = HandledAccess(MaxLandlockABI) &^ llIoctlDev
	}
	for _, s := range p.Steps {
		switch {
		case s.Kind == KindBind && s.Device:
			rules = append(rules, LandlockRule{Path: s.Target, Access: llDevice})
		case s.Kind == KindDevpts:
			rules = append(rules, LandlockRule{Path: s.Target, Access: llDevice | llReadDir})
		case s.Writable:
			rules = append(rules, LandlockRule{Path: s.Target, Access: HandledAccess(MaxLandlockABI)})
		}
	}
	return rules
}
