package hostcheck

import (
	"fmt"
	"strings"
)

// Sysctls that decide whether an unprivileged user may create a user
// namespace.
const (
	// SysctlUsernsClone is Debian's and Ubuntu's switch (absent from
	// mainline kernels): 0 lets only CAP_SYS_ADMIN holders create user
	// namespaces.
	SysctlUsernsClone = "kernel.unprivileged_userns_clone"
	// SysctlMaxUserNS caps user namespaces per user; 0 disables them for
	// everyone, root included (Linux 4.9).
	SysctlMaxUserNS = "user.max_user_namespaces"
	// SysctlAppArmorRestrict is AppArmor's restriction (Ubuntu 23.10+):
	// 1 lets unprivileged users create a user namespace only under an
	// AppArmor profile that grants `userns,`; otherwise the namespace holds
	// no capabilities and mounting in it fails.
	SysctlAppArmorRestrict = "kernel.apparmor_restrict_unprivileged_userns"
)

// UserNS reports, from the sysctls under procRoot, whether an unprivileged
// user can create user namespaces. A sysctl that does not exist does not
// restrict anything. The first blocking sysctl found decides the Result;
// every one found is named in Detail.
//
// Root (CAP_SYS_ADMIN) is exempt from SysctlUsernsClone and
// SysctlAppArmorRestrict but not from SysctlMaxUserNS=0; [UserNSForRoot]
// reads the sysctls with that in mind.
func UserNS(procRoot string) Result {
	return userNS(procRoot, false)
}

// The AppArmor restriction applies only to unconfined processes: one
// running under a profile gets what the profile grants (`userns,`), so
// [UserNS] does not count the sysctl against a confined process and
// leaves the verdict to a trial clone.

// UserNSForRoot is [UserNS] for a caller holding CAP_SYS_ADMIN: only
// SysctlMaxUserNS=0 blocks it.
func UserNSForRoot(procRoot string) Result {
	return userNS(procRoot, true)
}

func userNS(procRoot string, privileged bool) Result {
	var blocked []string
	var fix string
	var readErrs []string
	note := func(name, why, f string) {
		blocked = append(blocked, fmt.Sprintf("%s: %s", name, why))
		if fix == "" {
			fix = f
		}
	}
	read := func(name string) (int, bool) {
		v, ok, err := readInt(sysctlPath(procRoot, name))
		if err != nil {
			readErrs = append(readErrs, err.Error())
		}
		return v, ok
	}

	if v, ok := read(SysctlMaxUserNS); ok && v == 0 {
		note(SysctlMaxUserNS+"=0", "user namespaces are disabled for everyone",
			"sysctl -w "+SysctlMaxUserNS+"=15000 (persist it in /etc/sysctl.d/)")
	}
	if !privileged {
		if v, ok := read(SysctlUsernsClone); ok && v == 0 {
			note(SysctlUsernsClone+"=0", "only root may create user namespaces",
				"sysctl -w "+SysctlUsernsClone+"=1 (persist it in /etc/sysctl.d/)")
		}
		if v, ok := read(SysctlAppArmorRestrict); ok && v != 0 && AppArmorLabel(procRoot) == "unconfined" {
			note(SysctlAppArmorRestrict+"=1", "AppArmor denies unprivileged user namespaces unless a profile allows them",
				"sysctl -w "+SysctlAppArmorRestrict+"=0, or install an AppArmor profile for the tent binary that grants `userns,` (tent doctor --apparmor-profile prints one)")
		}
	}

	switch {
	case len(blocked) > 0:
		return Result{Status: Missing, Detail: strings.Join(blocked, "; "), Fix: fix}
	case len(readErrs) > 0:
		return Result{Status: Unknown, Detail: "cannot read sysctls: " + strings.Join(readErrs, "; ")}
	}
	return Result{Status: Available, Detail: "no sysctl restricts them"}
}
