package namespaces

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// unprivilegedPortStart is the per-network-namespace sysctl
// net.ipv4.ip_unprivileged_port_start (Linux 4.11): ports below it need
// CAP_NET_BIND_SERVICE in the namespace's owning user namespace. It
// covers IPv6 as well.
const unprivilegedPortStart = "/proc/sys/net/ipv4/ip_unprivileged_port_start"

// netnsSysctls sets what a sandbox's own network namespace needs to look
// like a machine's: every port may be bound by any user, as docker sets
// it in a container's namespace (net.ipv4.ip_unprivileged_port_start=0),
// so a web server inside binds port 80 without capabilities. The
// namespace holds only the sandbox's loopback (and, limited, tent's proxy
// listeners, bound before any command runs), so a low port gives no
// process anything it could not already have on another port; the host's
// namespace is never touched: /proc/sys/net shows the network namespace
// of the thread that opens it, here the sandbox's.
//
// The init calls it in its own network namespace (cfg.Loopback: not
// --net host), before the root filesystem is built: the new root's
// /proc/sys is read-only. A kernel without the sysctl (before 4.11) is
// left as it is.
func netnsSysctls(cfg *Config) error {
	if !cfg.Loopback {
		return nil
	}
	err := writeSysctl(unprivilegedPortStart, "0")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// specSysctls writes cfg.Sysctls (Spec.Sysctls), in name order, after
// netnsSysctls (so that the spec may set ip_unprivileged_port_start
// back) and before the root filesystem is built. Each is a sysctl of the
// init's own IPC or network namespace: /proc/sys shows the namespaces of
// the thread that opens it, and the kernel refuses a write to another
// one from this user namespace.
func specSysctls(cfg *Config) error {
	for _, k := range slices.Sorted(maps.Keys(cfg.Sysctls)) {
		path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
		if err := writeSysctl(path, cfg.Sysctls[k]); err != nil {
			return fmt.Errorf("sysctl %s=%q: %w", k, cfg.Sysctls[k], err)
		}
	}
	return nil
}

// writeSysctl writes value to the sysctl file path.
func writeSysctl(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("setting %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("setting %s to %s: %w", path, value, os.NewSyscallError("write", err))
	}
	return nil
}
