package netpolicy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// ServeTransparent accepts, on l, connections that programs made to an
// address and port of their choosing and that were caught for the proxy
// (in tent: a listener on every address of one port of the sandbox's
// network namespace, where every address is local), until l is closed,
// then returns nil. The destination is the accepted connection's local
// address: a fake address the stub DNS gave (see [Proxy.ServeDNS]) stands
// for its name, any other address for itself. From there a connection is
// handled as a CONNECT to that host and port would be: the same rule
// match, host-side resolution, private-address guard, audit records
// (proto "transparent") and denials, under the policy in force when it
// arrives. A refused connection is reset, so the program sees ECONNRESET
// at once. Such connections count towards [ProxyConfig.MaxConns] with the
// others; over it they are reset too.
func (p *Proxy) ServeTransparent(l net.Listener) error {
	return p.serve(l, "transparent", p.serveTransparentConn)
}

func (p *Proxy) serveTransparentConn(c net.Conn) {
	host, port, ok := p.destination(c.LocalAddr())
	if !ok {
		resetConn(c)
		return
	}
	u, err := p.open(p.ctx, "transparent", host, port)
	if err != nil {
		resetConn(c)
		return
	}
	if p.intercepts(p.Policy(), host, port) {
		p.interceptByFirstByte(c, nil, u, host, port)
		return
	}
	p.tunnel(c, u, nil)
}

// destination maps the local address of a caught connection to the host
// and port the program asked for.
func (p *Proxy) destination(local net.Addr) (string, int, bool) {
	ta, ok := local.(*net.TCPAddr)
	if !ok {
		return "", 0, false
	}
	ap := ta.AddrPort()
	a := ap.Addr().WithZone("").Unmap()
	if name, ok := p.fake.name(a); ok {
		return name, int(ap.Port()), true
	}
	return a.String(), int(ap.Port()), true
}

// FakeAddr returns the address the stub DNS answers for name, and false
// when it gave none (the name was never asked for, or not allowed).
func (p *Proxy) FakeAddr(name string) (netip.Addr, bool) {
	p.fake.mu.Lock()
	defer p.fake.mu.Unlock()
	a, ok := p.fake.byName[normalizeHost(name)]
	return a, ok
}

// resetConn closes c with a reset (SO_LINGER 0) where it can: the program
// sees ECONNRESET instead of an orderly end it could take for an answer.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.SetDeadline(time.Now())
	c.Close()
}

// interceptByFirstByte serves a connection to a host the proxy
// intercepts (caught, or a SOCKS5 one; pending is what the client sent
// already), by its first byte: TLS is terminated as for a CONNECT.
// Anything else is not HTTPS, so no secret goes in: to a host with HTTP
// rules it is read as clear-text HTTP and held to them (plain HTTP to
// port 80, say; other protocols fail as bad requests); to a host that only
// a secret names, clear-text HTTP is read the same way (without HTTP
// rules: to scrub the answers) and any other protocol is tunnelled as
// any host's would be (git over SSH to a host whose HTTPS API has a
// token, say).
func (p *Proxy) interceptByFirstByte(c net.Conn, pending []byte, u *upstream, host string, port int) {
	first := pending
	if len(first) == 0 {
		var b [1]byte
		_ = c.SetReadDeadline(p.lim.deadline(time.Now()))
		if _, err := io.ReadFull(c, b[:]); err != nil {
			p.finish(u, 0, 0)
			resetConn(c)
			return
		}
		first = b[:]
	}
	_ = c.SetReadDeadline(time.Time{})
	if first[0] == 0x16 { // a TLS handshake record
		if err := p.upstreamTLS(u, host); err != nil {
			resetConn(c)
			return
		}
		p.intercept(c, first, u, host, port)
		return
	}
	if !p.Policy().hasHTTPRules(host, port) {
		// A host only a secret names: clear-text HTTP is read (no
		// secret goes in, but the host's answers are scrubbed of the
		// values it may have kept from HTTPS requests); anything else
		// is tunnelled unread.
		var isHTTP bool
		_ = c.SetReadDeadline(p.lim.deadline(time.Now()))
		first, isHTTP = sniffMethod(c, first)
		_ = c.SetReadDeadline(time.Time{})
		if !isHTTP {
			p.tunnel(c, u, first)
			return
		}
	}
	defer c.Close()
	pc := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(append([]byte(nil), first...)), c)}
	s := &httpConn{p: p, c: pc, hr: &headReader{r: pc, capture: true},
		icpt: &interception{proto: u.rec.Proto, host: normalizeHost(host), port: port, plain: true}}
	s.br = bufio.NewReader(s.hr)
	s.bw = bufio.NewWriter(c)
	s.setUpstream(u, s.icpt.host+":"+strconv.Itoa(port))
	s.serve(time.Now())
}

// sniffMethod reads from c, after first (what the client sent already),
// as long as what it has could be the start of an HTTP request line's
// method: upper-case letters, at most 8 bytes. It returns every byte it
// has and whether they start with a method and a space. It reads no
// more than such a start, so a protocol whose client sends something
// else first is not held up; one whose first message is a few
// upper-case letters without an end waits for the head timeout.
func sniffMethod(c net.Conn, first []byte) ([]byte, bool) {
	b := first
	for {
		i := 0
		for i < len(b) && 'A' <= b[i] && b[i] <= 'Z' {
			i++
		}
		if i < len(b) {
			switch m := string(b[:i]); {
			case b[i] != ' ':
				return b, false
			case m == "GET", m == "HEAD", m == "POST", m == "PUT", m == "DELETE", m == "OPTIONS", m == "PATCH", m == "TRACE":
				return b, true
			}
			return b, false
		}
		if len(b) >= 8 {
			return b, false
		}
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err != nil {
			return b, false
		}
		b = append(b, one[0])
	}
}
