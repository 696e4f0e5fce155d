package netpolicy

import (
	"net"
	"net/netip"
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
	if p.Policy().Intercepts(host, port) {
		if err := p.upstreamTLS(u, host); err != nil {
			resetConn(c)
			return
		}
		p.intercept(c, nil, u, host, port)
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
