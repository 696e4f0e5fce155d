package netpolicy

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// replySource turns the destination a query came to (its IP_PKTINFO or
// IPV6_PKTINFO control message) into the control message that makes the
// answer leave from that address.
func replySource(oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			in := (*unix.Inet4Pktinfo)(unsafe.Pointer(&m.Data[0]))
			return unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: in.Addr})
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			in := (*unix.Inet6Pktinfo)(unsafe.Pointer(&m.Data[0]))
			return unix.PktInfo6(&unix.Inet6Pktinfo{Addr: in.Addr})
		}
	}
	return nil
}
