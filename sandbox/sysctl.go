package sandbox

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/netpolicy"
)

// ipcSysctls are the sysctls of an IPC namespace besides fs.mqueue.*:
// the sandbox has one of its own, so setting them changes nothing
// outside it (docker's and Kubernetes' namespaced sysctls).
var ipcSysctls = []string{
	"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni", "kernel.sem",
	"kernel.shm_rmid_forced", "kernel.shmall", "kernel.shmmax", "kernel.shmmni",
}

// Bounds of Spec.Sysctls.
const (
	maxSysctls     = 64
	maxSysctlName  = 256
	maxSysctlValue = 4096
)

// ValidateSysctls checks sysctls as Spec.Sysctls of a sandbox whose
// network policy is network: names of the sandbox's own IPC namespace
// (kernel.msg*, kernel.sem, kernel.shm*, fs.mqueue.*) or, unless it
// shares the host's network (mode host), of its own network namespace
// (net.*); one line of printable text each. The kernel checks the value
// when the init writes it, and the IPC ones also need the sandbox's user
// to be uid 0 inside (checked when it starts). Provisioning and starting
// check a Spec with it; callers that build specs (the OCI runtime) may
// check earlier.
func ValidateSysctls(sysctls map[string]string, network NetworkPolicy) error {
	if len(sysctls) > maxSysctls {
		return fmt.Errorf("sysctls: %d of them, at most %d", len(sysctls), maxSysctls)
	}
	for _, k := range slices.Sorted(maps.Keys(sysctls)) {
		v := sysctls[k]
		if !sysctlName(k) {
			return fmt.Errorf("sysctls: %q is not a sysctl name (dotted words of a-z, 0-9, _ and -)", k)
		}
		switch {
		case slices.Contains(ipcSysctls, k), strings.HasPrefix(k, "fs.mqueue."):
		case strings.HasPrefix(k, "net."):
			if network.Mode.Normalize() == netpolicy.Host {
				return fmt.Errorf("sysctls: %s: the sandbox shares the host's network namespace (network mode host), whose sysctls are the host's", k)
			}
		default:
			return fmt.Errorf("sysctls: %s is not a sysctl of the sandbox's own namespaces: only kernel.msgmax, kernel.msgmnb, kernel.msgmni, kernel.sem, kernel.shm_rmid_forced, kernel.shmall, kernel.shmmax, kernel.shmmni, fs.mqueue.* (IPC) and net.* (its network) can be set", k)
		}
		if v == "" || len(v) > maxSysctlValue || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return fmt.Errorf("sysctls: %s: value %q must be one line of 1 to %d bytes", k, v, maxSysctlValue)
		}
	}
	return nil
}

// ipcSysctl returns one of m's IPC sysctls (the first in name order).
func ipcSysctl(m map[string]string) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !strings.HasPrefix(k, "net.") {
			return k, true
		}
	}
	return "", false
}

// sysctlName reports whether k is dotted words of lower-case letters,
// digits, '_' and '-' (so that its /proc/sys path has no "." or "..").
func sysctlName(k string) bool {
	if len(k) > maxSysctlName || k == "" {
		return false
	}
	for w := range strings.SplitSeq(k, ".") {
		if w == "" || strings.ContainsFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) {
			return false
		}
	}
	return true
}
