//go:build linux

package fs

// llRead is read access to files and directories, without execute.
const llRead = llReadFile | llReadDir

// hostSystemPaths are the host directories a command on the host's own
// filesystem may read and execute: the full tier's system directories
// plus /opt.
var hostSystemPaths = append(append([]string(nil), DefaultSystemPaths...), "/opt")

// hostDevices are the device nodes it may read, write and ioctl.
var hostDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// HostLandlockRules returns the Landlock rules of a command that runs on
// the host's own filesystem, without a mount namespace (tent's reduced
// tier), in this order: read on /proc; read and execute on the system
// directories ([DefaultSystemPaths] and /opt); read, write, truncate and
// ioctl on /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom and
// /dev/tty; then one rule per mount on its host path (Source): every right
// for a rw mount, read and execute otherwise (without a mount namespace a
// cow mount cannot have an overlay: it is read-only). Targets are not
// looked at: there is no mount, so the caller refuses a mount whose
// target is not its source.
func HostLandlockRules(mounts []Mount) []LandlockRule {
	rules := make([]LandlockRule, 0, 1+len(hostSystemPaths)+len(hostDevices)+len(mounts))
	rules = append(rules, LandlockRule{Path: "/proc", Access: llRead})
	for _, p := range hostSystemPaths {
		rules = append(rules, LandlockRule{Path: p, Access: llReadExec})
	}
	for _, d := range hostDevices {
		rules = append(rules, LandlockRule{Path: d, Access: llDevice})
	}
	for _, m := range mounts {
		access := uint64(llReadExec)
		if m.Access == ReadWrite {
			access = HandledAccess(MaxLandlockABI)
		}
		rules = append(rules, LandlockRule{Path: m.Source, Access: access})
	}
	return rules
}
