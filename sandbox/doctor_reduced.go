package sandbox

import (
	"os"

	"github.com/tent-sandbox/tent/internal/hostcheck"
)

// ReducedTierNote is what the doctor adds to a missing user namespace
// check: what tent run does instead.
const ReducedTierNote = "tent run uses the reduced tier (no namespaces; Landlock, seccomp, no_new_privs, rlimits or a cgroup; network none through seccomp) and refuses policies that need more unless --best-effort; tent create is unavailable"

// withReducedTier adds ReducedTierNote to a missing user namespace check.
func withReducedTier(r hostcheck.Result) hostcheck.Result {
	if r.Status == hostcheck.Missing {
		r.Detail += "; " + ReducedTierNote
	}
	return r
}

// AppArmorProfile returns an AppArmor profile that lets the tent binary at
// binary (this executable when empty) create user namespaces under
// kernel.apparmor_restrict_unprivileged_userns=1, headed by a comment
// saying where to install it and how to load it (apparmor_parser -r).
func AppArmorProfile(binary string) (string, error) {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		binary = exe
	}
	return hostcheck.AppArmorProfile(binary), nil
}
