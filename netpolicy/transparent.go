package netpolicy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
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
		var err error
		_ = c.SetReadDeadline(p.lim.deadline(time.Now()))
		first, isHTTP, err = sniffRequestLine(c, first, p.lim.maxHead)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			// It stopped (or ended) where it could still be HTTP:
			// tunnelled, the rest of its request would go unread.
			p.finish(u, 0, 0)
			resetConn(c)
			return
		}
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

// sniffRequestLine reads from c, after first (what the client sent
// already), as long as what it has could be the start of an HTTP/1
// request line, whatever its method: a method (token characters), a
// space, a target (no space or control character), then a space and
// "HTTP/", or the line's end after GET (HTTP/0.9, which servers still
// answer). It returns every byte it has and whether they start such a
// line; past max bytes, still consistent with one, they do (the head's
// bound applies to them then). It reads no more than a line's start, so
// a protocol whose client sends something else first (SSH's "SSH-2.0",
// a binary hello, "SET k v") is not held up. An error is that of a read
// that stopped it before it could tell (the head timeout, the client's
// end).
func sniffRequestLine(c net.Conn, first []byte, max int64) ([]byte, bool, error) {
	b := first
	var buf [512]byte
	for {
		if isHTTP, decided := requestLineStart(b); decided {
			return b, isHTTP, nil
		}
		if max > 0 && int64(len(b)) >= max {
			return b, true, nil
		}
		n, err := c.Read(buf[:])
		b = append(b, buf[:n]...)
		if err != nil {
			if isHTTP, decided := requestLineStart(b); decided {
				return b, isHTTP, nil
			}
			return b, false, err
		}
	}
}

// requestLineStart reports whether b starts an HTTP/1 request line (see
// sniffRequestLine), and whether it can tell yet.
func requestLineStart(b []byte) (isHTTP, decided bool) {
	i := 0
	for i < len(b) && tokenChar(b[i]) {
		i++
	}
	switch {
	case i == len(b):
		return false, false
	case i == 0 || b[i] != ' ':
		return false, true
	}
	method := string(b[:i])
	i++
	start := i
	for i < len(b) && b[i] > ' ' && b[i] != 0x7f {
		i++
	}
	switch {
	case i == len(b):
		return false, false
	case i == start:
		return false, true
	case b[i] == '\r' || b[i] == '\n':
		return method == "GET", true // HTTP/0.9: "GET /path"
	case b[i] != ' ':
		return false, true
	}
	const proto = "HTTP/"
	rest := b[i+1:]
	n := min(len(rest), len(proto))
	if string(rest[:n]) != proto[:n] {
		return false, true
	}
	return n == len(proto), n == len(proto)
}

// tokenChar reports whether c may be in an HTTP token (a method).
func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
