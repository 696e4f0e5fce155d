// Package rtnl is the little of rtnetlink that tent needs: bringing a
// network interface up with larger segment limits, and reading those
// limits back (which the tests do).
package rtnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LoopbackIndex is the interface index of lo in every network namespace
// (the kernel's LOOPBACK_IFINDEX).
const LoopbackIndex = 1

// Link is what [GetLink] reports about an interface.
type Link struct {
	Up bool
	// GSOMaxSize is the largest segment the stack builds for the
	// interface (IFLA_GSO_MAX_SIZE; IPv6, and IPv4 on kernels before
	// 6.3); GSOIPv4MaxSize is IPv4's own limit (IFLA_GSO_IPV4_MAX_SIZE,
	// Linux 6.3), zero where the kernel has none.
	GSOMaxSize, GSOIPv4MaxSize uint32
}

// SetUpGSO brings interface index up and sets its GSO limits (IPv6 and
// IPv4) to gso, in one RTM_NEWLINK request, and returns the kernel's
// answer. Kernels older than 6.3 ignore the IPv4 limit; kernels older
// than 5.19 refuse a limit above 64 KiB.
func SetUpGSO(index int, gso uint32) error {
	attrs := []unix.RtAttr{{Type: unix.IFLA_GSO_MAX_SIZE}, {Type: unix.IFLA_GSO_IPV4_MAX_SIZE}}
	const attrLen = unix.SizeofRtAttr + 4
	body := make([]byte, unix.SizeofIfInfomsg+len(attrs)*attrLen)
	*(*unix.IfInfomsg)(unsafe.Pointer(&body[0])) = unix.IfInfomsg{
		Family: unix.AF_UNSPEC,
		Index:  int32(index),
		Flags:  unix.IFF_UP,
		Change: unix.IFF_UP,
	}
	off := unix.SizeofIfInfomsg
	for _, a := range attrs {
		a.Len = attrLen
		*(*unix.RtAttr)(unsafe.Pointer(&body[off])) = a
		binary.NativeEndian.PutUint32(body[off+unix.SizeofRtAttr:], gso)
		off += attrLen
	}
	_, err := request(unix.RTM_NEWLINK, unix.NLM_F_ACK, body)
	return err
}

// GetLink reports whether interface index is up and its GSO limits.
func GetLink(index int) (Link, error) {
	body := make([]byte, unix.SizeofIfInfomsg)
	*(*unix.IfInfomsg)(unsafe.Pointer(&body[0])) = unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)}
	answer, err := request(unix.RTM_GETLINK, 0, body)
	if err != nil {
		return Link{}, err
	}
	if len(answer) < unix.SizeofIfInfomsg {
		return Link{}, fmt.Errorf("rtnetlink: short RTM_NEWLINK answer (%d bytes)", len(answer))
	}
	info := (*unix.IfInfomsg)(unsafe.Pointer(&answer[0]))
	l := Link{Up: info.Flags&unix.IFF_UP != 0}
	for b := answer[unix.SizeofIfInfomsg:]; len(b) >= unix.SizeofRtAttr; {
		a := (*unix.RtAttr)(unsafe.Pointer(&b[0]))
		if int(a.Len) < unix.SizeofRtAttr || int(a.Len) > len(b) {
			return Link{}, errors.New("rtnetlink: malformed attribute")
		}
		v := b[unix.SizeofRtAttr:a.Len]
		switch {
		case a.Type == unix.IFLA_GSO_MAX_SIZE && len(v) == 4:
			l.GSOMaxSize = binary.NativeEndian.Uint32(v)
		case a.Type == unix.IFLA_GSO_IPV4_MAX_SIZE && len(v) == 4:
			l.GSOIPv4MaxSize = binary.NativeEndian.Uint32(v)
		}
		b = b[min(len(b), (int(a.Len)+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1)):]
	}
	return l, nil
}

// request sends one rtnetlink request of type typ with body and returns
// the body of the kernel's one answer: nil for an acknowledgement, the
// message for a query. An NLMSG_ERROR answer with a non-zero code is
// returned as that errno.
func request(typ uint16, flags uint16, body []byte) ([]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket(AF_NETLINK)", err)
	}
	defer unix.Close(fd)
	msg := make([]byte, unix.SizeofNlMsghdr+len(body))
	*(*unix.NlMsghdr)(unsafe.Pointer(&msg[0])) = unix.NlMsghdr{
		Len:   uint32(len(msg)),
		Type:  typ,
		Flags: unix.NLM_F_REQUEST | flags,
		Seq:   1,
	}
	copy(msg[unix.SizeofNlMsghdr:], body)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	answer := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, answer, 0)
	if err != nil {
		return nil, os.NewSyscallError("recvfrom", err)
	}
	answer = answer[:n]
	if n < unix.SizeofNlMsghdr {
		return nil, fmt.Errorf("rtnetlink: short answer (%d bytes)", n)
	}
	h := (*unix.NlMsghdr)(unsafe.Pointer(&answer[0]))
	if int(h.Len) < unix.SizeofNlMsghdr || int(h.Len) > n || h.Seq != 1 {
		return nil, errors.New("rtnetlink: malformed answer")
	}
	answer = answer[unix.SizeofNlMsghdr:h.Len]
	if h.Type == unix.NLMSG_ERROR {
		if len(answer) < 4 {
			return nil, errors.New("rtnetlink: short error answer")
		}
		if errno := int32(binary.NativeEndian.Uint32(answer)); errno != 0 {
			return nil, unix.Errno(-errno)
		}
		return nil, nil
	}
	return answer, nil
}

// AddLocalDefault adds, in the calling thread's network namespace, a route
// of type local for every destination of family (unix.AF_INET or
// unix.AF_INET6) through the loopback device, in the local table: what
// "ip route add local default dev lo table local" does. Every address of
// that family then counts as one of the namespace's own, so a connection
// to any of them reaches a socket listening on the wildcard address of its
// port (or is refused at once when none does), and the accepted socket's
// local address is the destination the program asked for. It needs
// CAP_NET_ADMIN over the namespace.
func AddLocalDefault(family uint8) error {
	const attrLen = unix.SizeofRtAttr + 4
	body := make([]byte, unix.SizeofRtMsg+attrLen)
	*(*unix.RtMsg)(unsafe.Pointer(&body[0])) = unix.RtMsg{
		Family:   family,
		Table:    unix.RT_TABLE_LOCAL,
		Protocol: unix.RTPROT_BOOT,
		Scope:    unix.RT_SCOPE_HOST,
		Type:     unix.RTN_LOCAL,
	}
	off := unix.SizeofRtMsg
	*(*unix.RtAttr)(unsafe.Pointer(&body[off])) = unix.RtAttr{Len: attrLen, Type: unix.RTA_OIF}
	binary.NativeEndian.PutUint32(body[off+unix.SizeofRtAttr:], LoopbackIndex)
	_, err := request(unix.RTM_NEWROUTE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
	return err
}
