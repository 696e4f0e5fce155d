package namespaces

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/rtnl"
)

// The transparent side of a limited sandbox's network (Config.Transparent).
// The init only makes sockets here; the host serves them (netpolicy), so
// none of this adds a dependency to the re-executed binary.
//
// A route of type local for every IPv4 and IPv6 destination, in the
// sandbox's own network namespace, makes every address the sandbox's own:
// a TCP connection to any address reaches the listener on the wildcard
// address of its port, whose accepted socket's local address is the
// destination the program asked for; a connection to a port nobody listens
// on, and a UDP datagram to any port but 53, is refused at once (RST,
// ICMP port unreachable), and nothing ever leaves the namespace.

// DNSPort is the UDP port of the sandbox's stub DNS, caught on every
// address (see Config.Transparent).
const DNSPort = 53

// localRoutes adds the local default routes; IPv6 only where the kernel
// has it.
func localRoutes() error {
	if err := rtnl.AddLocalDefault(unix.AF_INET); err != nil {
		return fmt.Errorf("transparent network: local default route: %w", os.NewSyscallError("rtnetlink", err))
	}
	if err := rtnl.AddLocalDefault(unix.AF_INET6); err != nil && !errors.Is(err, unix.EAFNOSUPPORT) {
		return fmt.Errorf("transparent network: local default IPv6 route: %w", os.NewSyscallError("rtnetlink", err))
	}
	return nil
}

// wildcardSocket returns a socket of typ bound to port on every IPv4 and
// IPv6 address (one dual-stack socket; IPv4 alone without IPv6), and
// whether it is IPv6.
func wildcardSocket(typ, port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, typ|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EAFNOSUPPORT) {
		fd, err = unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, os.NewSyscallError("socket", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("port %d: %w", port, os.NewSyscallError("bind", err))
		}
		return fd, nil
	}
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt(IPV6_V6ONLY)", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: port}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("port %d: %w", port, os.NewSyscallError("bind", err))
	}
	return fd, nil
}

// catchListeners listens on ports of every address, one listening socket
// per port, in this (the sandbox's) network namespace.
func catchListeners(ports []int) ([]int, error) {
	var fds []int
	for _, port := range ports {
		if port < 1 || port > 65535 {
			closeAll(fds)
			return nil, fmt.Errorf("transparent network: bad port %d", port)
		}
		fd, err := wildcardSocket(unix.SOCK_STREAM, port)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("transparent network: %w", err)
		}
		fds = append(fds, fd)
		if err := unix.Listen(fd, 1024); err != nil {
			closeAll(fds)
			return nil, os.NewSyscallError("listen", err)
		}
	}
	return fds, nil
}

// dnsSocket is the stub DNS's socket: UDP port 53 of every address, with
// the destination of each datagram reported (IP_PKTINFO, IPV6_RECVPKTINFO)
// so that the host answers from the address the program asked (with
// IP_FREEBIND: IPv6 accepts as a source only the interfaces' addresses).
func dnsSocket() (int, error) {
	fd, err := wildcardSocket(unix.SOCK_DGRAM, DNSPort)
	if err != nil {
		return -1, fmt.Errorf("transparent network: DNS: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt(IP_PKTINFO)", err)
	}
	// IPv6 checks an answer's source against the interfaces' addresses,
	// not the routes: free binding lets it leave from any address.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt(IP_FREEBIND)", err)
	}
	sa, err := unix.Getsockname(fd)
	if _, v6 := sa.(*unix.SockaddrInet6); err == nil && v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("setsockopt(IPV6_RECVPKTINFO)", err)
		}
	}
	return fd, nil
}

// transparentSockets makes the stub DNS's socket and the catching
// listeners, in that order.
func transparentSockets(ports []int) ([]int, error) {
	dns, err := dnsSocket()
	if err != nil {
		return nil, err
	}
	ls, err := catchListeners(ports)
	if err != nil {
		unix.Close(dns)
		return nil, err
	}
	return append([]int{dns}, ls...), nil
}

// dialLocal starts a TCP connection to port on the sandbox's loopback,
// 127.0.0.1 or, with v6, ::1, without waiting for it: the socket is
// non-blocking and may still be connecting (a refusal shows in SO_ERROR).
func dialLocal(port int, v6 bool) (int, error) {
	if port < 1 || port > 65535 {
		return -1, fmt.Errorf("bad port %d", port)
	}
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if v6 {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return -1, os.NewSyscallError("connect", err)
	}
	return fd, nil
}
