package sandbox

import "github.com/tent-sandbox/tent/namespaces"

// grantable are the capabilities a command may keep (see
// Identity.Capabilities): what images use to set up and drop privileges,
// and what acts on the sandbox's own network, ipc and pid namespaces.
var grantable = map[string]bool{
	"CAP_CHOWN": true, "CAP_DAC_OVERRIDE": true, "CAP_FOWNER": true, "CAP_FSETID": true, "CAP_KILL": true,
	"CAP_SETGID": true, "CAP_SETUID": true, "CAP_SETPCAP": true, "CAP_NET_BIND_SERVICE": true,
	"CAP_NET_BROADCAST": true, "CAP_NET_ADMIN": true, "CAP_IPC_LOCK": true,
	"CAP_IPC_OWNER": true, "CAP_SYS_CHROOT": true, "CAP_MKNOD": true, "CAP_LEASE": true, "CAP_AUDIT_WRITE": true,
}

// Grantable reports whether a command may keep the capability named
// name (see [Identity].Capabilities).
func Grantable(name string) bool {
	c, ok := namespaces.CapabilityNumber(name)
	return ok && grantable[namespaces.CapabilityName(c)]
}

// GrantableCapabilities lists the capabilities a command may keep, in
// the order of their numbers (see [Identity].Capabilities).
func GrantableCapabilities() []string {
	var names []string
	for c := range 64 {
		if n := namespaces.CapabilityName(c); grantable[n] {
			names = append(names, n)
		}
	}
	return names
}
