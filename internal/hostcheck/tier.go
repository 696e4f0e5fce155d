package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// AppArmorLabel returns the AppArmor label of the process whose /proc is
// procRoot/self: procRoot/self/attr/apparmor/current (Linux 5.8, LSM
// stacking) or else procRoot/self/attr/current, with a trailing " (mode)"
// removed ("tent (unconfined)" → "tent"). A process under no profile, or
// one whose label cannot be read, is "unconfined".
func AppArmorLabel(procRoot string) string {
	for _, p := range []string{"self/attr/apparmor/current", "self/attr/current"} {
		data, err := os.ReadFile(filepath.Join(procRoot, filepath.FromSlash(p)))
		if err != nil {
			continue
		}
		label := strings.TrimRight(string(data), "\x00\n ")
		if i := strings.LastIndex(label, " ("); i > 0 && strings.HasSuffix(label, ")") {
			label = label[:i]
		}
		if label == "" {
			continue
		}
		return label
	}
	return "unconfined"
}

// UserNSCloneBlocked reports whether err, from a trial
// clone(CLONE_NEWUSER) or from writing the new namespace's uid_map, means
// that user namespaces are unavailable to this process: EPERM (a sysctl,
// AppArmor, a container's seccomp profile), EACCES (AppArmor on some
// kernels), ENOSPC (user.max_user_namespaces reached or 0) or EINVAL (a
// kernel built without CONFIG_USER_NS).
func UserNSCloneBlocked(err error) bool {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.ENOSPC, syscall.EINVAL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// UserNSAvailability decides whether tent can use user namespaces here:
// the sysctls under procRoot first ([UserNS] for an unprivileged caller,
// [UserNSForRoot] when privileged), then cloneErr, the outcome of a trial
// clone (nil when it succeeded or was not made). Missing means tent runs
// its reduced tier; Detail names the knob that blocks and Fix how to lift
// it.
func UserNSAvailability(procRoot string, privileged bool, cloneErr error) Result {
	r := UserNS(procRoot)
	if privileged {
		r = UserNSForRoot(procRoot)
	}
	if cloneErr != nil && UserNSCloneBlocked(cloneErr) {
		d := "a trial clone(CLONE_NEWUSER) failed: " + cloneErr.Error()
		if r.Status == Missing {
			d += "; " + r.Detail
		}
		fix := r.Fix
		if fix == "" {
			fix = "if tent runs in a container, allow user namespaces in it (for Docker: --security-opt seccomp=unconfined, or a profile that allows clone/unshare with CLONE_NEWUSER)"
		}
		return Result{Status: Missing, Detail: d, Fix: fix}
	}
	return r
}

// AppArmorProfile is the AppArmor profile that lets the tent binary at
// binary create user namespaces under
// kernel.apparmor_restrict_unprivileged_userns=1, in the shape Ubuntu
// documents for such programs: unconfined apart from that grant. The first
// line says where to install it and how to load it.
func AppArmorProfile(binary string) string {
	name := "tent"
	if base := filepath.Base(binary); base != "tent" {
		name = "tent-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
				return r
			}
			return '_'
		}, base)
	}
	return fmt.Sprintf(`# Install as /etc/apparmor.d/%[1]s and load it: sudo apparmor_parser -r /etc/apparmor.d/%[1]s
abi <abi/4.0>,
include <tunables/global>

profile %[1]s %[2]s flags=(unconfined) {
  userns,

  # Site-specific additions and overrides. See local/README for details.
  include if exists <local/%[1]s>
}
`, name, quoteAppArmorPath(binary))
}

// quoteAppArmorPath quotes a path that holds spaces (AppArmor's syntax).
func quoteAppArmorPath(p string) string {
	if strings.ContainsAny(p, " \t") {
		return `"` + p + `"`
	}
	return p
}
