package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// ServeHTTP accepts HTTP proxy connections on l until l is closed (by the
// caller or by [Proxy.Close]), then returns nil. Each connection may carry
// any number of absolute-form requests ("GET http://host/path"), each
// checked on its own, or one CONNECT, after which it is a tunnel.
func (p *Proxy) ServeHTTP(l net.Listener) error { return p.serve(l, "http", p.serveHTTPConn) }

// ServeSOCKS5 accepts SOCKS5 connections on l until l is closed, then
// returns nil. It supports the no-authentication method and the CONNECT
// command with domain, IPv4 and IPv6 addresses.
func (p *Proxy) ServeSOCKS5(l net.Listener) error { return p.serve(l, "socks5", p.serveSOCKS5Conn) }

func (p *Proxy) serve(l net.Listener, proto string, handle func(net.Conn)) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	p.listeners[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		p.wg.Done()
	}()
	var backoff time.Duration
	for {
		if !p.enterAccept() {
			return nil
		}
		c, err := l.Accept()
		if err != nil {
			paused := p.leaveAccept()
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if paused && errors.Is(err, os.ErrDeadlineExceeded) {
				continue // Pause interrupted Accept; wait for Resume
			}
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) &&
				!errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ENOMEM) &&
				!errors.Is(err, syscall.ECONNABORTED) {
				return fmt.Errorf("netpolicy: failed to accept on %s: %w", l.Addr(), err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("netpolicy: accept failed; retrying", "sandbox", p.id, "err", err, "delay", backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		ok := p.spawn(c, proto, handle)
		p.leaveAccept()
		if !ok {
			return nil
		}
	}
}

// enterAccept waits while the proxy is paused and then counts a serve
// loop into Accept; false once the proxy is closed.
func (p *Proxy) enterAccept() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.paused && !p.closed {
		p.resumed.Wait()
	}
	if p.closed {
		return false
	}
	p.accepting++
	return true
}

// leaveAccept counts a serve loop out of Accept (and spawn) and reports
// whether the proxy is paused.
func (p *Proxy) leaveAccept() (paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.accepting--
	p.resumed.Broadcast()
	return p.paused
}

// Pause stops the proxy accepting connections, without closing its
// listeners: connections that arrive meanwhile wait in the listeners'
// backlogs. It returns once no serve loop is inside Accept, so that
// [Proxy.Active] counts every connection accepted before it; [Proxy.Resume]
// starts accepting again. It returns an error, and leaves the proxy
// serving, if a listener's Accept cannot be interrupted (it has no
// SetDeadline).
func (p *Proxy) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ds []interface{ SetDeadline(time.Time) error }
	for l := range p.listeners {
		d, ok := l.(interface{ SetDeadline(time.Time) error })
		if !ok {
			return fmt.Errorf("netpolicy: cannot pause: listener %s has no deadline", l.Addr())
		}
		ds = append(ds, d)
	}
	p.paused = true
	for _, d := range ds {
		_ = d.SetDeadline(time.Unix(1, 0)) // in the past: Accept returns at once
	}
	for p.accepting > 0 {
		p.resumed.Wait()
	}
	return nil
}

// Resume undoes [Proxy.Pause]: the serve loops accept again, starting
// with the connections that waited.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.listeners {
		if d, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
			_ = d.SetDeadline(time.Time{})
		}
	}
	p.paused = false
	p.resumed.Broadcast()
}

// spawn tracks c and runs handle(c) in a goroutine Close waits for, or
// refuses c when the proxy already serves MaxConns clients; it closes c
// and returns false once the proxy is closed.
func (p *Proxy) spawn(c net.Conn, proto string, handle func(net.Conn)) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return false
	}
	if p.clients >= p.lim.maxConns {
		p.mu.Unlock()
		p.overLimit(c, proto)
		return true
	}
	p.clients++
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer func() {
			p.untrack(c)
			p.mu.Lock()
			p.clients--
			p.mu.Unlock()
		}()
		handle(c)
	}()
	return true
}

// overLimit refuses a client connection over MaxConns: it counts it,
// audits the first one, answers an HTTP client 503 and closes c. It runs
// in the accept loop: the reply fits any socket buffer, and its write is
// bounded anyway.
func (p *Proxy) overLimit(c net.Conn, proto string) {
	p.denials.add("", 0, ReasonTooManyConns)
	if p.count.refusedConns.Add(1) == 1 {
		p.record(AuditRecord{Event: EventLimit, Proto: proto, Verdict: VerdictDeny, Reason: ReasonTooManyConns, Limit: p.lim.maxConns})
		p.log.Warn("netpolicy: too many connections to the proxy; refusing more (counted in the denials, not logged)",
			"sandbox", p.id, "limit", p.lim.maxConns)
	}
	if proto == "transparent" {
		resetConn(c)
		return
	}
	if proto == "http" {
		_ = c.SetWriteDeadline(time.Now().Add(refuseTimeout))
		_, _ = c.Write(tooManyConnsReply(p.lim.maxConns))
	}
	c.Close()
}

// Active reports how many connections the proxy holds open: a tunnel or
// a request in progress, or an idle kept-alive client connection.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// track registers c so that Close closes it; false (and c closed) if the
// proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
