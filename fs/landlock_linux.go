package fs

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LandlockABI returns the Landlock ABI version of the running kernel, or 0
// with the reason when Landlock is unavailable (kernel older than 5.13,
// LSM not enabled with lsm=, or disabled at boot).
func LandlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == 0:
		return int(v), nil
	case errno == unix.ENOSYS:
		return 0, fmt.Errorf("landlock: not built into this kernel (needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK): %w", errno)
	case errno == unix.EOPNOTSUPP:
		return 0, fmt.Errorf("landlock: built in but disabled (add landlock to the lsm= kernel parameter): %w", errno)
	}
	return 0, fmt.Errorf("landlock: probing the ABI: %w", os.NewSyscallError("landlock_create_ruleset", errno))
}

// BuildRuleset creates a Landlock ruleset for abi holding rules (paths are
// resolved in the caller's current root), plus file rules for each of
// ttyFDs that is a character device, so the command can reopen its own
// terminal through /dev/stdout, and read+execute rules for each of
// execFDs (files). The returned descriptor is close-on-exec; pass it to
// [RestrictThread]. Rules whose path does not exist are skipped.
func BuildRuleset(abi int, rules []LandlockRule, ttyFDs, execFDs []int) (int, error) {
	return buildRuleset(abi, rules, false, ttyFDs, execFDs)
}

// BuildRulesetNoTCP is [BuildRuleset] that also handles TCP bind and
// connect (LANDLOCK_ACCESS_NET_BIND_TCP and _CONNECT_TCP, ABI 4, Linux
// 6.7) with no network rule, so every TCP bind and connect is denied. It
// stands in for an empty network namespace where there is none; below ABI
// 4 it is BuildRuleset (see [HandledNet]).
func BuildRulesetNoTCP(abi int, rules []LandlockRule, ttyFDs, execFDs []int) (int, error) {
	return buildRuleset(abi, rules, true, ttyFDs, execFDs)
}

// HandledNet returns the network rights ABI abi can restrict: TCP bind
// and connect from ABI 4, none before.
func HandledNet(abi int) uint64 {
	if abi >= 4 {
		return unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	return 0
}

func buildRuleset(abi int, rules []LandlockRule, noTCP bool, ttyFDs, execFDs []int) (int, error) {
	handled := HandledAccess(abi)
	if handled == 0 {
		return -1, fmt.Errorf("landlock: ABI %d is not usable", abi)
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled, Scoped: Scoped(abi)}
	if noTCP {
		attr.Handled_access_net = HandledNet(abi)
	}
	// Up to Scoped; kernels that predate a field accept it as long as it is zero.
	size := unsafe.Offsetof(attr.Quiet_access_fs)
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock: %w", os.NewSyscallError("landlock_create_ruleset", errno))
	}
	ruleset := int(r)
	unix.CloseOnExec(ruleset)
	for _, rule := range rules {
		fd, err := unix.Open(rule.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			unix.Close(ruleset)
			return -1, fmt.Errorf("landlock: opening %s: %w", rule.Path, err)
		}
		err = addRule(ruleset, fd, rule.Access&handled)
		unix.Close(fd)
		if err != nil {
			unix.Close(ruleset)
			return -1, fmt.Errorf("landlock: rule for %s: %w", rule.Path, err)
		}
	}
	for _, fd := range ttyFDs {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		if err := addRule(ruleset, fd, llDevice&handled); err != nil {
			unix.Close(ruleset)
			return -1, fmt.Errorf("landlock: rule for terminal fd %d: %w", fd, err)
		}
	}
	for _, fd := range execFDs {
		if err := addRule(ruleset, fd, (llExecute|llReadFile)&handled); err != nil {
			unix.Close(ruleset)
			return -1, fmt.Errorf("landlock: rule for executable fd %d: %w", fd, err)
		}
	}
	return ruleset, nil
}

func addRule(ruleset, fd int, access uint64) error {
	if access == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= llExecute | llReadFile | llWriteFile | llTruncate | llIoctlDev // rights that apply to files
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return os.NewSyscallError("landlock_add_rule", errno)
	}
	return nil
}

// RestrictThread enforces ruleset on the calling OS thread only (never
// the whole process). Precondition: no_new_privs is set on this thread and
// the goroutine is locked to it; every process it forks inherits the
// domain.
func RestrictThread(ruleset int) error {
	_, _, errno := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock: %w", os.NewSyscallError("landlock_restrict_self", errno))
	}
	return nil
}
