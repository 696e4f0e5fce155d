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

// dropCaps empties every capability set of the calling thread but keep
// (a mask of CAP_* bits, usually 0): bounding and ambient first (they
// need CAP_SETPCAP), then effective, permitted and inheritable with
// capset, then ambient (a part of keep) is raised into the ambient set.
// Across execve a command running as uid 0 then holds keep, one running
// as another uid ambient only (no_new_privs caps what an exec can grant
// at what the thread holds), as runc gives an OCI process's sets. It
// calls between, when set, after
// the bounding and ambient sets are reduced and before capset: the last
// moment the thread still holds CAP_SETUID and CAP_SETGID (see [Creds]).
func dropCaps(between func() error, keep, ambient uint64) error {
	// A thread without CAP_SETPCAP (an unprivileged caller of the
	// reduced tier) cannot shrink its bounding set. It keeps it: the set
	// only caps what an exec could grant, and under no_new_privs, with
	// every other set empty and a non-root uid, an exec grants nothing.
	keepBounding := !hasEffectiveCap(unix.CAP_SETPCAP)
	for c := 0; c <= lastCap() && !keepBounding; c++ {
		if keep&(1<<uint(c)) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return os.NewSyscallError("prctl(PR_CAPBSET_DROP)", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", err)
	}
	if keep != 0 {
		// Keep the permitted set across between's uid change (0 to
		// another id clears it otherwise).
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return os.NewSyscallError("prctl(PR_SET_KEEPCAPS)", err)
		}
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		m := uint32(keep >> (32 * uint(i)))
		data[i] = unix.CapUserData{Effective: m, Permitted: m, Inheritable: m}
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	ambient &= keep
	for c := 0; c <= lastCap() && ambient != 0; c++ {
		if ambient&(1<<uint(c)) == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return os.NewSyscallError("prctl(PR_CAP_AMBIENT_RAISE)", err)
		}
	}
	return nil
}

// hasEffectiveCap reports whether the calling thread holds capability c
// in its effective set.
func hasEffectiveCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return true // let PR_CAPBSET_DROP report the problem
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}
