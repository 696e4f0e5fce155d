package namespaces

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/rtnl"
)

// LoopbackGSO is the largest TCP segment a sandbox's own loopback carries
// (its GSO limit, for IPv4 and IPv6): 512 KiB less 8 bytes, the most the
// loopback device takes (its tso_max_size). A new network namespace's lo
// starts at 64 KiB, like the host's.
//
// Every connection of a limited sandbox goes through its loopback, to the
// proxy listeners, and a bulk transfer costs the kernel per segment as
// well as per byte. On this project's development VM (2 vCPUs, Linux
// 6.18), per 256 MiB downloaded over TLS through the proxy, the larger
// segments took the host process's CPU time (TLS server and proxy) from
// about 300 to 265 ms and the downloading program's from 215 to 175 ms;
// BenchmarkLimitedDownload's ratio to the direct rate went from 0.73-0.77
// to 0.93-0.99 (with the proxy's huge-page buffers, netpolicy). The IPv6
// limit needs Linux 5.19 and the IPv4 one Linux 6.3; older kernels keep
// 64 KiB, which is only slower. The host's loopback is never touched.
//
// It is set for every sandbox with its own network namespace, not only
// limited ones: programs inside that move bulk data to each other over
// loopback (a test suite's local servers) gain in the same way. It costs
// about 40 µs at start (one RTM_NEWLINK instead of two ioctls: 123 µs
// against 83 µs here).
const LoopbackGSO = 524280

// loopbackUp brings up lo in the new network namespace with segments of
// up to gso bytes (LoopbackGSO). Bringing it up must work; the larger
// segments are a speed-up only, so a kernel that refuses them is not an
// error.
func loopbackUp(gso uint32) error {
	if err := rtnl.SetUpGSO(rtnl.LoopbackIndex, gso); err == nil {
		return nil
	}
	return loopbackUpIoctl()
}

// loopbackUpIoctl brings up lo, and nothing more, with SIOCSIFFLAGS.
func loopbackUpIoctl() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("ioctl(SIOCGIFFLAGS)", err))
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("ioctl(SIOCSIFFLAGS)", err))
	}
	return nil
}
