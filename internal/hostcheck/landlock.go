package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// LandlockWant is the Landlock ABI from which tent's filesystem, network
// and scoping rules are all enforced (Linux 6.12).
const LandlockWant = 6

// landlockLost lists what each ABI level below LandlockWant lacks, from the
// top down: an ABI below level misses what.
var landlockLost = []struct {
	level int
	what  string
}{
	{6, "no scoping of abstract unix sockets and signals (ABI 6, Linux 6.12)"},
	{5, "no control of ioctl on devices (ABI 5, Linux 6.10)"},
	{4, "no TCP bind/connect rules (ABI 4, Linux 6.7)"},
	{3, "no control of truncate (ABI 3, Linux 6.2)"},
	{2, "no control of renames and links across directories, which are then denied (ABI 2, Linux 5.19)"},
}

// Landlock turns the result of probing the Landlock ABI (abi and probeErr
// as returned by landlock_create_ruleset(NULL, 0,
// LANDLOCK_CREATE_RULESET_VERSION), for example by fs.LandlockABI) into a
// Result. ABI LandlockWant or above is Available, 1 up to it Degraded with
// what is missing, 0 Missing with the reason: ENOSYS (kernel older than
// 5.13 or built without CONFIG_SECURITY_LANDLOCK) or EOPNOTSUPP (built in
// but not enabled: the lsm= boot parameter, whose current value is read
// from sysRoot/kernel/security/lsm when readable).
func Landlock(abi int, probeErr error, sysRoot string) Result {
	if probeErr == nil && abi >= LandlockWant {
		return Result{Status: Available, Detail: fmt.Sprintf("ABI %d", abi)}
	}
	if probeErr == nil && abi > 0 {
		var lost []string
		for _, l := range landlockLost {
			if abi < l.level {
				lost = append(lost, l.what)
			}
		}
		return Result{
			Status: Degraded,
			Detail: fmt.Sprintf("ABI %d: %s", abi, strings.Join(lost, "; ")),
			Fix:    fmt.Sprintf("boot Linux 6.12 or newer for Landlock ABI %d", LandlockWant),
		}
	}

	lsm := ""
	if data, err := os.ReadFile(filepath.Join(sysRoot, "kernel", "security", "lsm")); err == nil {
		lsm = strings.TrimSpace(string(data))
	}
	switch {
	case errors.Is(probeErr, syscall.EOPNOTSUPP):
		d := "built into the kernel but not enabled (EOPNOTSUPP)"
		f := "add landlock to the lsm= kernel boot parameter"
		if lsm != "" {
			d += "; active LSMs: " + lsm
			f += fmt.Sprintf(" (for example lsm=landlock,%s) and reboot", lsm)
		} else {
			f += " and reboot"
		}
		return Result{Status: Missing, Detail: d, Fix: f}
	case errors.Is(probeErr, syscall.ENOSYS):
		return Result{
			Status: Missing,
			Detail: "not in this kernel (ENOSYS): older than 5.13 or built without CONFIG_SECURITY_LANDLOCK",
			Fix:    "boot Linux 5.13 or newer built with CONFIG_SECURITY_LANDLOCK=y (6.12+ for every rule tent uses)",
		}
	case probeErr != nil:
		return Result{Status: Missing, Detail: "probing the ABI failed: " + probeErr.Error()}
	}
	return Result{Status: Missing, Detail: fmt.Sprintf("kernel reports ABI %d", abi)}
}
