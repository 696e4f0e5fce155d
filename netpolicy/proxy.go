package netpolicy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	// MaxNames caps the names the stub DNS gives fake addresses to (see
	// [Proxy.ServeDNS]); 0 means [DefaultMaxNames].
	MaxNames int
	// HostsFile is the hosts file the stub DNS reads for a name no name
	// rule allows (see [Proxy.ServeDNS]); "" means [DefaultHostsFile].
	// Tests point it at a file of their own.
	HostsFile string
	// FakeNames are the stub DNS's earlier answers ([Proxy.FakeNames] of
	// the proxy this one takes over from), kept with the same meaning.
	FakeNames []FakeName

	// CA mints the certificates of the hosts the proxy intercepts (those
	// a secret or an HTTP rule of the policy names; see "Interception" in
	// the package documentation). Without one, connections to such hosts
	// are refused (502): the proxy never lets them through unchecked.
	CA *CA
	// UpstreamRoots are the certificate authorities an intercepted host's
	// certificate must chain to; nil means the host's trust store (Go's
	// system roots). Tests and private deployments add their own here.
	UpstreamRoots *x509.CertPool
	// Secrets gives the values of the policy's secrets, asked each time a
	// request goes out (see [SecretSource]). nil means the values the
	// policies carry inline (Secret.Value), kept in the proxy's memory.
	Secrets SecretSource
}

// Proxy is the host side of a limited sandbox's network: it serves HTTP
// proxy requests (plain forwarding and CONNECT) and SOCKS5 CONNECT on
// listeners the caller passes, letting through only what the current
// policy allows. Its methods are safe for concurrent use.
type Proxy struct {
	policy atomic.Pointer[Compiled]
	// retired holds the values of secrets of earlier policies (a header
	// transform rotated, removed or bound elsewhere by SetPolicy): their
	// hosts may still echo them, so those hosts stay intercepted and
	// responses are scrubbed of them too.
	retired   atomic.Pointer[retiredSecrets]
	retiredMu sync.Mutex // serializes updates of retired, last and forms
	// src gives the secrets' values, asked per request (resolve); inline
	// is src when the caller gave none (values from the policies).
	src    SecretSource
	inline *SecretMap
	// last are the secrets as last resolved with a value, by name.
	last     map[string]compiledSecret
	forms    map[formsKey][]scrubPair // makeForms, by secret and value
	id       string
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	audit    auditLog
	log      *slog.Logger
	denials  denials
	bulk     chan struct{} // large tunnel buffers in use (see pump)
	lim      limits
	count    counters
	fake     fakeNames // the stub DNS's answers (transparent sandboxes)
	hosts    hostsFile // the host's hosts file, as the stub DNS reads it
	ca       *CA
	roots    *x509.CertPool

	ctx    context.Context // cancelled by Close: aborts lookups and dials
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	paused    bool       // Pause: serve loops wait on resumed
	accepting int        // serve loops inside Accept, or between it and spawn
	resumed   *sync.Cond // on mu: paused or accepting changed
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // client and upstream connections
	dnsConns  []*net.UDPConn        // ServeDNS sockets, closed by Close
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
		ca:        cfg.CA,
		roots:     cfg.UpstreamRoots,
	}
	p.denials.max = p.lim.maxDenials
	p.fake.max = cfg.MaxNames
	if p.fake.max <= 0 {
		p.fake.max = DefaultMaxNames
	}
	p.fake.restore(cfg.FakeNames)
	p.hosts.path = cfg.HostsFile
	if p.hosts.path == "" {
		p.hosts.path = DefaultHostsFile
	}
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
	p.src, p.last, p.forms = cfg.Secrets, map[string]compiledSecret{}, map[formsKey][]scrubPair{}
	if p.src == nil {
		p.inline = &SecretMap{}
		p.src = p.inline
	}
	p.SetPolicy(cfg.Policy)
	return p
}

// SetPolicy atomically replaces the policy. Every connection accepted
// afterwards, and every later request on a kept-alive HTTP connection,
// follows c; tunnels already established are left open. nil denies
// everything. A proxy without [ProxyConfig.Secrets] takes the values c's
// secrets carry (Secret.Value) as its own.
func (p *Proxy) SetPolicy(c *Compiled) {
	p.retiredMu.Lock()
	defer p.retiredMu.Unlock()
	p.seed(c)
	p.policy.Store(c)
	// A value last sent to hosts that c no longer binds its secret to
	// (or a secret c lacks) is retired now; one whose value changes is
	// retired by the next request (resolve).
	for name, last := range p.last {
		if c != nil && slices.ContainsFunc(c.secrets, func(s compiledSecret) bool {
			return s.Name == name && slices.Equal(s.Hosts, last.Hosts) && s.Placeholder == last.Placeholder
		}) {
			continue
		}
		p.retireLocked(last)
		delete(p.last, name)
	}
}

// seed gives a proxy without a source of its own the inline values of
// c's secrets.
func (p *Proxy) seed(c *Compiled) {
	if p.inline == nil || c == nil {
		return
	}
	for _, s := range c.policy.Secrets {
		if s.Value != "" {
			_ = p.inline.Set(s.Name, s.Value) // Compile checked it
		}
	}
}

// retiredSecrets are secrets whose values the proxy sent and no longer
// sends to the same hosts (rotated, revoked, removed or bound elsewhere),
// newest last, at most maxRetired; all are their forms. Their hosts stay
// intercepted (see intercepts).
type retiredSecrets struct {
	secrets []compiledSecret
	all     []scrubPair
}

// maxRetired bounds the secrets a proxy keeps scrubbing after it
// stopped sending them.
const maxRetired = 64

// sameSent reports whether a and b are one value sent to the same hosts.
func sameSent(a, b compiledSecret) bool {
	return a.value == b.value && slices.Equal(a.Hosts, b.Hosts)
}

// retireLocked adds s (with its value) to p.retired. p.retiredMu is held.
func (p *Proxy) retireLocked(s compiledSecret) {
	var kept []compiledSecret
	if r := p.retired.Load(); r != nil {
		if slices.ContainsFunc(r.secrets, func(c compiledSecret) bool { return sameSent(c, s) }) {
			return
		}
		kept = slices.Clone(r.secrets)
	}
	kept = append(kept, s)
	if len(kept) > maxRetired {
		kept = slices.Clone(kept[len(kept)-maxRetired:])
	}
	p.retired.Store(&retiredSecrets{secrets: kept, all: allPairs(kept)})
}

// unretireLocked drops s from p.retired: a value that is sent again is no
// longer retired. p.retiredMu is held.
func (p *Proxy) unretireLocked(s compiledSecret) {
	r := p.retired.Load()
	if r == nil || !slices.ContainsFunc(r.secrets, func(c compiledSecret) bool { return sameSent(c, s) }) {
		return
	}
	kept := slices.DeleteFunc(slices.Clone(r.secrets), func(c compiledSecret) bool { return sameSent(c, s) })
	p.retired.Store(&retiredSecrets{secrets: kept, all: allPairs(kept)})
}

// scrubFor returns what responses from host:port are scrubbed of, given
// secrets as resolved for the request: the forms of the values of those
// bound to it, and of the retired ones that were.
func (p *Proxy) scrubFor(secrets []compiledSecret, host string, port int) []scrubPair {
	pairs := scrubPairs(secrets, host, port)
	if r := p.retired.Load(); r != nil {
		if more := scrubPairs(r.secrets, host, port); len(more) > 0 {
			pairs = sortPairs(append(pairs, more...))
		}
	}
	return pairs
}

// intercepts reports whether the proxy terminates TLS to host:port under
// pol: a host a secret or an HTTP rule of pol names, or one a retired
// secret was bound to. Such a host received the value and may echo it:
// tunnelled end to end, its answers would reach the sandbox unscrubbed.
func (p *Proxy) intercepts(pol *Compiled, host string, port int) bool {
	if pol == nil || pol.Mode() != Limited {
		return false
	}
	if pol.Intercepts(host, port) {
		return true
	}
	if r := p.retired.Load(); r != nil {
		h := normalizeHost(host)
		for i := range r.secrets {
			if r.secrets[i].boundTo(h, port) {
				return true
			}
		}
	}
	return false
}

// Policy returns the policy in force (nil if none).
func (p *Proxy) Policy() *Compiled { return p.policy.Load() }

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
	for _, c := range p.dnsConns { // no one appends once closed is set
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
