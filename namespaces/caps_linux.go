package namespaces

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var lastCap = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
})

// dropAllCaps empties every capability set of the calling thread:
// bounding and ambient first (they need CAP_SETPCAP), then effective,
// permitted and inheritable with capset.
func dropAllCaps() error {
	for c := 0; c <= lastCap(); c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return os.NewSyscallError("prctl(PR_CAPBSET_DROP)", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return os.NewSyscallError("capset", unix.Capset(&hdr, &data[0]))
}
