package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// dialTimeout bounds resolving plus connecting for one destination.
const dialTimeout = 10 * time.Second

// Resolver resolves host names to addresses; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ProxyConfig configures a [Proxy]. Policy decides what the sandbox may
// reach; the limits (MaxConns to AuditBytes) bound what the sandbox can
// make the proxy spend, and their zero values are safe defaults. A
// negative limit means no limit: only for a caller that bounds the
// sandbox's connections some other way.
type ProxyConfig struct {
	// Policy is the initial policy; nil denies everything until
	// [Proxy.SetPolicy] installs one.
	Policy *Compiled
	// SandboxID labels audit records and log lines.
	SandboxID string
	// Resolver resolves allowed names on the host; nil means
	// net.DefaultResolver. It is only ever asked about names the policy
	// allows.
	Resolver Resolver
	// Dial connects to the exact address that was checked, always given
	// as "ip:port" with network "tcp" (never a name: no second lookup);
	// nil means a net.Dialer with a 10 s timeout. A connection with a
	// CloseWrite method (as *net.TCPConn has) lets tunnels pass half-closes
	// on; without one, the end of either direction closes the tunnel.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Audit receives one JSON line ([AuditRecord]) per decision and per
	// closed upstream connection, each line in a single Write; nil
	// discards them.
	Audit io.Writer
	// Logger receives debug records of decisions and warnings; nil
	// discards them. Warnings about limits come once per proxy.
	Logger *slog.Logger

	// MaxConns caps the client connections, HTTP and SOCKS5 together, the
	// proxy serves at once; 0 means [DefaultMaxConns] (256). A connection
	// over the cap is accepted and closed at once: an HTTP one after a 503
	// response, a SOCKS5 one without a reply. The first such refusal is
	// audited (event "limit"), and one more record at [Proxy.Close] gives
	// their number; [Proxy.Denied] counts them under [ReasonTooManyConns].
	MaxConns int
	// MaxHeaderBytes caps a request head on the HTTP proxy (request line
	// and header fields; give or take the 4 KiB read buffer on a kept-alive
	// connection), and the head of a response on plain forwarding; 0 means
	// [DefaultMaxHeaderBytes] (64 KiB). Where it applies, a head may also
	// have at most 256 header fields (each costs some 200 bytes once
	// parsed). A request over either is answered 431 and its connection
	// closed; a response, 502. SOCKS5 needs no such cap: its fields are at
	// most 255 bytes.
	MaxHeaderBytes int
	// HeadTimeout bounds the time a client has to send a complete request
	// head: on a new HTTP connection from the accept, on a kept-alive one
	// from the first byte of the request (the wait for that byte is
	// bounded by 2 minutes), and for the SOCKS5 handshake; 0 means
	// [DefaultHeadTimeout] (30 s). An HTTP client that runs out of it gets
	// 408 if it sent anything; the connection is closed. It never applies
	// after the head: tunnels and bodies may take as long as they take.
	// Negative leaves only the 2-minute bound on the wait for the first
	// byte of an HTTP request.
	HeadTimeout time.Duration
	// MaxDenials caps the distinct destinations (host, port and reason)
	// [Proxy.Denied] lists; 0 means [DefaultMaxDenials] (256). Refusals of
	// further destinations are counted in one entry per reason with an
	// empty Host.
	MaxDenials int
	// AuditBytes is the audit log's budget in bytes for the proxy's life;
	// 0 means [DefaultAuditBytes] (64 MiB). Once the next record would
	// not fit, one record (event "limit", reason [ReasonAuditBudget]) says
	// that records are dropped from there on, and [Proxy.Close] writes a
	// last one with their count; the budget includes both (a budget too
	// small for them is raised to fit them). Records are at most a few
	// hundred bytes: host names in them are cut to 253 bytes.
	AuditBytes int64
}

// Proxy is the host side of a limited sandbox's network: it serves HTTP
// proxy requests (plain forwarding and CONNECT) and SOCKS5 CONNECT on
// listeners the caller passes, letting through only what the current
// policy allows. Its methods are safe for concurrent use.
type Proxy struct {
	policy   atomic.Pointer[Compiled]
	id       string
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	audit    auditLog
	log      *slog.Logger
	denials  denials
	bulk     chan struct{} // large tunnel buffers in use (see pump)
	lim      limits
	count    counters

	ctx    context.Context // cancelled by Close: aborts lookups and dials
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	paused    bool       // Pause: serve loops wait on resumed
	accepting int        // serve loops inside Accept, or between it and spawn
	resumed   *sync.Cond // on mu: paused or accepting changed
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // client and upstream connections
	clients   int64                 // client connections being served (MaxConns)
	wg        sync.WaitGroup        // serve loops and connection handlers
}

// ErrProxyClosed is returned by [Proxy.ServeHTTP] and [Proxy.ServeSOCKS5]
// when they are called after [Proxy.Close].
var ErrProxyClosed = errors.New("netpolicy: proxy closed")

// NewProxy returns a proxy that serves nothing until ServeHTTP or
// ServeSOCKS5 is called.
func NewProxy(cfg ProxyConfig) *Proxy {
	p := &Proxy{
		id:        cfg.SandboxID,
		resolver:  cfg.Resolver,
		dial:      cfg.Dial,
		log:       cfg.Logger,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
		bulk:      make(chan struct{}, largeBudget),
		lim:       resolveLimits(&cfg),
	}
	p.denials.max = p.lim.maxDenials
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dial == nil {
		p.dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.audit.init(cfg.Audit, p.log, p.id, p.lim.auditBytes)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.resumed = sync.NewCond(&p.mu)
	p.policy.Store(cfg.Policy)
	return p
}

// SetPolicy atomically replaces the policy. Every connection accepted
// afterwards, and every later request on a kept-alive HTTP connection,
// follows c; tunnels already established are left open. nil denies
// everything.
func (p *Proxy) SetPolicy(c *Compiled) { p.policy.Store(c) }

// Policy returns the policy in force (nil if none).
func (p *Proxy) Policy() *Compiled { return p.policy.Load() }

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

// Close closes the listeners being served, every client connection and
// tunnel, aborts lookups and dials in progress, and waits until every
// goroutine the proxy started has returned. It then writes the audit
// records that close the limits' accounts (connections refused over
// MaxConns, records dropped over AuditBytes), if any were reached, and
// writes nothing more. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.resumed.Broadcast() // paused serve loops return
	ls := make([]net.Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	cs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, l := range ls {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("netpolicy: failed to close listener %s: %w", l.Addr(), err))
		}
	}
	for _, c := range cs {
		c.Close()
	}
	p.wg.Wait()
	if n := p.count.refusedConns.Load(); n > 0 {
		p.record(AuditRecord{Event: EventLimit, Verdict: VerdictDeny, Reason: ReasonTooManyConns, Limit: p.lim.maxConns, Count: n})
	}
	p.audit.close(time.Now().UTC())
	return errors.Join(errs...)
}

// Denied returns the refusals so far, one entry per destination and
// reason, in order of first occurrence, at most [ProxyConfig.MaxDenials]
// destinations and one entry per reason beyond them; see [Denial] and
// [Summary].
func (p *Proxy) Denied() []Denial { return p.denials.snapshot() }

// refusal is a destination the policy refused.
type refusal struct {
	host string
	port int
	d    Decision
}

func (e *refusal) Error() string {
	return fmt.Sprintf("%s: %s", net.JoinHostPort(e.host, strconv.Itoa(e.port)), e.d.Reason)
}

// failure is an allowed destination that could not be resolved or reached.
type failure struct {
	op   string // "resolve" or "connect"
	dest string
	err  error
}

func (e *failure) Error() string { return fmt.Sprintf("failed to %s %s: %v", e.op, e.dest, e.err) }
func (e *failure) Unwrap() error { return e.err }

// upstream is a connection to a checked destination.
type upstream struct {
	net.Conn
	addr netip.Addr  // the checked address c is connected to
	rec  AuditRecord // the allow decision, reused for the close record
}

// open decides on host:port, resolves allowed names, checks every address
// and connects to the first one that passed. It audits the outcome and
// returns a *refusal or a *failure on error.
//
// A name longer than DNS allows is refused before anything else; records
// keep host as [storedHost] has it.
func (p *Proxy) open(ctx context.Context, proto, host string, port int) (*upstream, error) {
	pol := p.policy.Load()
	rec := AuditRecord{Proto: proto, Host: recordHost(host), Port: port}
	var d Decision
	if len(host) > maxNameLen+2 { // even without brackets or a final dot
		d = Decision{Reason: ReasonInvalidHost}
	} else {
		d = pol.CheckName(host, port)
	}
	if !d.Allowed {
		return nil, p.refuse(rec, d)
	}
	name := normalizeHost(host) // allowed, so a valid name or IP literal: rec.Host
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(name); err == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else {
		addrs, err = p.resolver.LookupNetIP(ctx, "ip", name)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			return nil, p.fail(rec, d, "resolve", err)
		}
	}
	var ok []netip.Addr
	var refused Decision
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		ad := pol.CheckAddr(a, port)
		if ad.Allowed {
			ok = append(ok, a)
		} else if refused.Reason == "" {
			refused, rec.Addr = ad, a.String()
		}
	}
	if len(ok) == 0 {
		return nil, p.refuse(rec, refused)
	}
	var err error
	for _, a := range ok {
		rec.Addr = a.String()
		var c net.Conn
		c, err = p.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			if !p.track(c) {
				return nil, p.fail(rec, d, "connect", ErrProxyClosed)
			}
			rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictAllow, d.Rule, d.Reason
			p.record(rec)
			return &upstream{Conn: c, addr: a, rec: rec}, nil
		}
	}
	return nil, p.fail(rec, d, "connect", err)
}

// recheck applies the current policy to a kept-alive upstream connection
// for a new request to the same host and port, and audits the decision.
func (p *Proxy) recheck(u *upstream, proto, host string, port int) error {
	pol := p.policy.Load()
	rec := AuditRecord{Proto: proto, Host: recordHost(host), Port: port}
	d := pol.CheckName(host, port)
	if !d.Allowed {
		return p.refuse(rec, d)
	}
	rec.Addr = u.rec.Addr
	if ad := pol.CheckAddr(u.addr, port); !ad.Allowed {
		return p.refuse(rec, ad)
	}
	rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictAllow, d.Rule, d.Reason
	p.record(rec)
	return nil
}

// finish closes u and writes its close record.
func (p *Proxy) finish(u *upstream, up, down int64) {
	p.untrack(u.Conn)
	rec := u.rec
	rec.Event, rec.BytesUp, rec.BytesDown = EventClose, up, down
	p.record(rec)
}

func (p *Proxy) refuse(rec AuditRecord, d Decision) error {
	if d.Reason == "" {
		d.Reason = ReasonPrivate
	}
	rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictDeny, d.Rule, d.Reason
	p.record(rec)
	p.denials.add(rec.Host, rec.Port, d.Reason)
	return &refusal{host: rec.Host, port: rec.Port, d: d}
}

func (p *Proxy) fail(rec AuditRecord, d Decision, op string, err error) error {
	rec.Event, rec.Verdict, rec.Rule = EventDecision, VerdictError, d.Rule
	rec.Reason = fmt.Sprintf("failed to %s: %v", op, err)
	p.record(rec)
	return &failure{op: op, dest: net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)), err: err}
}

func (p *Proxy) record(rec AuditRecord) {
	rec.Time, rec.Sandbox = time.Now().UTC(), p.id
	p.audit.write(rec)
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p.log.Debug("netpolicy: "+rec.Event, "sandbox", p.id, "proto", rec.Proto, "host", rec.Host,
		"port", rec.Port, "addr", rec.Addr, "verdict", rec.Verdict, "rule", rec.Rule, "reason", rec.Reason,
		"bytes_up", rec.BytesUp, "bytes_down", rec.BytesDown)
}
