package netpolicy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS5 protocol values (RFC 1928).
const (
	socksVersion      = 5
	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff
	socksCmdConnect   = 0x01
	socksAtypIPv4     = 0x01
	socksAtypDomain   = 0x03
	socksAtypIPv6     = 0x04

	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02 // connection not allowed by ruleset
	socksNetUnreachable   = 0x03
	socksHostUnreachable  = 0x04
	socksConnRefused      = 0x05
	socksCmdNotSupported  = 0x07
	socksAtypNotSupported = 0x08
	socksReplyLen         = 10 // with a zero IPv4 bound address
)

// serveSOCKS5Conn serves one SOCKS5 connection: a handshake within
// HeadTimeout, then a tunnel. Every field of the handshake is at most 255
// bytes (its length is one byte), so it needs no size limit.
func (p *Proxy) serveSOCKS5Conn(c net.Conn) {
	c.SetDeadline(p.lim.deadline(time.Now()))
	br := bufio.NewReaderSize(c, 512)
	host, port, err := socksHandshake(c, br)
	if err != nil {
		if isTimeout(err) {
			p.count.headTimeouts.Add(1)
		}
		return
	}
	c.SetDeadline(time.Time{})
	u, err := p.open(p.ctx, "socks5", host, port)
	if err != nil {
		socksReply(c, socksFailureCode(err))
		return
	}
	if socksReply(c, socksSucceeded) != nil {
		p.finish(u, 0, 0)
		return
	}
	pending, _ := br.Peek(br.Buffered())
	if p.intercepts(p.Policy(), host, port) {
		// By what the client sends: TLS is intercepted, SSH to a
		// secret's host tunnelled (see interceptByFirstByte).
		p.interceptByFirstByte(c, append([]byte(nil), pending...), u, host, port)
		return
	}
	p.tunnel(c, u, pending)
}

// errSOCKS is a handshake the proxy refused or could not follow.
var errSOCKS = errors.New("bad SOCKS5 handshake")

// socksHandshake reads the method negotiation and the request, answering
// what it must refuse itself. It returns the destination of a CONNECT, or
// the error that ended the handshake (errSOCKS for one it refused).
func socksHandshake(c net.Conn, br *bufio.Reader) (host string, port int, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return "", 0, err
	}
	if hdr[0] != socksVersion {
		return "", 0, errSOCKS
	}
	var mb [255]byte
	methods := mb[:hdr[1]]
	if _, err := io.ReadFull(br, methods); err != nil {
		return "", 0, err
	}
	method := byte(socksNoAcceptable)
	for _, m := range methods {
		if m == socksNoAuth {
			method = socksNoAuth
		}
	}
	if _, err := c.Write([]byte{socksVersion, method}); err != nil {
		return "", 0, err
	}
	if method != socksNoAuth {
		return "", 0, errSOCKS
	}
	var req [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return "", 0, err
	}
	if req[0] != socksVersion {
		return "", 0, errSOCKS
	}
	switch req[3] {
	case socksAtypIPv4, socksAtypIPv6:
		var ab [16]byte
		b := ab[:4]
		if req[3] == socksAtypIPv6 {
			b = ab[:16]
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return "", 0, err
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case socksAtypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return "", 0, err
		}
		var nb [255]byte
		if _, err := io.ReadFull(br, nb[:n]); err != nil {
			return "", 0, err
		}
		host = string(nb[:n])
	default:
		socksReply(c, socksAtypNotSupported)
		return "", 0, errSOCKS
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return "", 0, err
	}
	if req[1] != socksCmdConnect {
		socksReply(c, socksCmdNotSupported)
		return "", 0, errSOCKS
	}
	return host, int(pb[0])<<8 | int(pb[1]), nil
}

// socksReply sends a reply with a zero bound address: the host's own
// addresses are none of the sandbox's business, and CONNECT clients
// ignore it.
func socksReply(c net.Conn, code byte) error {
	var b [socksReplyLen]byte
	b[0], b[1], b[3] = socksVersion, code, socksAtypIPv4
	_, err := c.Write(b[:])
	return err
}

// socksFailureCode maps an error from open to a SOCKS5 reply code.
func socksFailureCode(err error) byte {
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		return socksNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksNetUnreachable
	case errors.Is(err, ErrProxyClosed):
		return socksGeneralFailure
	}
	return socksHostUnreachable
}
