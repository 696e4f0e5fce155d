package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reasons of the refusals of intercepted requests.
const (
	// ReasonHostMismatch: the TLS server name (SNI) or the Host header of
	// a request on an intercepted connection names another host than the
	// one the connection was opened to.
	ReasonHostMismatch = "host mismatch"
	// ReasonSmuggling: a request with both Content-Length and
	// Transfer-Encoding, which two HTTP parsers may frame differently.
	ReasonSmuggling = "conflicting Content-Length and Transfer-Encoding"
	// ReasonUpgrade: a protocol upgrade (websocket, h2c) on an intercepted
	// connection, which the proxy would have to stop inspecting.
	ReasonUpgrade = "protocol upgrade not supported on an intercepted host"
)

// EventRequest is the audit event of one request on an intercepted
// connection (or a plain HTTP request checked against HTTP rules).
const EventRequest = "request"

// interception describes a TLS connection the proxy terminated.
type interception struct {
	proto string // how the connection came: "connect", "socks5" or "transparent"
	host  string // normalised name the connection was opened to
	port  int
	// plain is a caught connection that did not start with TLS: HTTP in
	// clear text, held to the HTTP rules, never given a secret.
	plain bool
}

// scheme is what the requests of ic speak, as the audit log names it.
func (ic *interception) scheme() string {
	if ic.plain {
		return "http"
	}
	return "https"
}

// upstreamTLS starts TLS on u to host, verifying the certificate against
// the proxy's upstream roots. On failure it closes u, audits the error
// and returns a *failure.
func (p *Proxy) upstreamTLS(u *upstream, host string) error {
	name := normalizeHost(host)
	cfg := &tls.Config{
		ServerName: name,
		RootCAs:    p.roots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	}
	tc := tls.Client(u.Conn, cfg)
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	err := errNoCA
	if p.ca != nil {
		err = tc.HandshakeContext(ctx)
	}
	if err != nil {
		p.untrack(u.Conn)
		// The error may quote the host's certificate (the names it is
		// valid for), which the host chose: one that learnt a secret's
		// value from an earlier request could name it there.
		err = scrubError(err, p.scrubFor(p.resolve(p.policy.Load()), name, u.rec.Port))
		rec := u.rec
		rec.Event, rec.Verdict = EventDecision, VerdictError
		rec.Reason = "cannot intercept: " + errNoCA.Error()
		if p.ca != nil {
			rec.Reason = clampText("failed to verify TLS: "+err.Error(), 512)
		}
		p.record(rec)
		return &failure{op: "verify the TLS of", dest: net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)), err: err}
	}
	u.tls = tc
	return nil
}

// intercept terminates the client's TLS (pending: bytes it sent already)
// with a certificate for host minted by the proxy's CA, then serves its
// HTTP/1.1 requests to host over u, which upstreamTLS has prepared. The
// server name the client asks for must be host (or absent); only
// http/1.1 is offered by ALPN, so HTTP/2 clients fall back to it.
func (p *Proxy) intercept(client net.Conn, pending []byte, u *upstream, host string, port int) {
	defer client.Close()
	name := normalizeHost(host)
	var mismatch string
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && normalizeHost(hello.ServerName) != name {
				mismatch = hello.ServerName
				return nil, fmt.Errorf("server name %q is not %q", hello.ServerName, name)
			}
			return p.ca.leaf(name)
		},
	}
	var cc net.Conn = client
	if len(pending) > 0 {
		cc = &prefixConn{Conn: client, r: io.MultiReader(bytes.NewReader(append([]byte(nil), pending...)), client)}
	}
	ts := tls.Server(cc, cfg)
	accepted := time.Now()
	_ = client.SetDeadline(p.lim.deadline(accepted))
	if err := ts.Handshake(); err != nil {
		p.finish(u, 0, 0)
		rec := AuditRecord{Event: EventDecision, Proto: u.rec.Proto, Host: u.rec.Host, Port: port, Verdict: VerdictError,
			Reason: clampText("the program's TLS handshake with the proxy failed (does it trust the proxy's CA, $TENT_CA_CERT?): "+err.Error(), 512)}
		if mismatch != "" {
			rec.Verdict, rec.Reason = VerdictDeny, ReasonHostMismatch+": TLS server name "+storedHost(mismatch)
			p.denials.add(u.rec.Host, port, ReasonHostMismatch)
		}
		p.record(rec)
		return
	}
	_ = client.SetDeadline(time.Time{})
	s := &httpConn{p: p, c: ts, hr: &headReader{r: ts, capture: true}, icpt: &interception{proto: u.rec.Proto, host: name, port: port}}
	s.br = bufio.NewReader(s.hr)
	s.bw = bufio.NewWriter(ts)
	s.setUpstream(u, name+":"+strconv.Itoa(port))
	s.serve(accepted)
}

// prefixConn reads r (bytes already read from Conn, then Conn).
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// forwardIntercepted checks and relays one request read from an
// intercepted connection. It reports whether the connection may carry
// another.
func (s *httpConn) forwardIntercepted(req *http.Request) bool {
	ic := s.icpt
	head := s.hr.captured()
	if req.Method == http.MethodConnect {
		return s.interceptRefusal(req, http.StatusMethodNotAllowed, ReasonUpgrade, "", "tent: CONNECT inside an intercepted connection\n")
	}
	if req.Header.Get("Upgrade") != "" || req.Method == "PRI" {
		return s.interceptRefusal(req, http.StatusNotImplemented, ReasonUpgrade, "", "tent: "+ReasonUpgrade+": "+ic.host+" is intercepted because a secret or an HTTP rule names it\n")
	}
	if hasField(head, "content-length") && hasField(head, "transfer-encoding") {
		return s.interceptRefusal(req, http.StatusBadRequest, ReasonSmuggling, "", "tent: refused a request with both Content-Length and Transfer-Encoding\n")
	}
	if req.URL.Scheme != "" && (req.URL.Scheme != ic.scheme() || !sameHost(req.URL.Host, ic.host, ic.port)) {
		return s.interceptRefusal(req, http.StatusForbidden, ReasonHostMismatch, "", fmt.Sprintf("tent: this connection is to %s: the request names %s\n", ic.host, clampText(req.URL.Host, maxNameLen)))
	}
	if !sameHost(req.Host, ic.host, ic.port) {
		return s.interceptRefusal(req, http.StatusForbidden, ReasonHostMismatch, "", fmt.Sprintf("tent: this connection is to %s: the Host header names %s\n", ic.host, clampText(req.Host, maxNameLen)))
	}
	pol := s.p.Policy()
	d, ok, keep := s.checkRequest(req, pol, ic.host, ic.port)
	if !ok {
		return keep
	}
	key := ic.host + ":" + strconv.Itoa(ic.port)
	secrets := s.p.resolve(pol) // the values sent with this request, and scrubbed from its answer
	s.scrub = s.p.scrubFor(secrets, ic.host, ic.port)
	reused := s.up != nil
	if !reused { // the last upstream connection ended: a new one, checked afresh
		if err := s.dial(ic.host, ic.port, key); err != nil {
			return s.refused(err, req)
		}
	}
	// What the records keep is the path the sandbox sent, with its
	// placeholders, never one a value was put into.
	path := recordPath(req)
	sub := substitute(secrets, req, ic.host, ic.port, !ic.plain)
	if len(sub.made) > 0 {
		s.scrub = sortPairs(append(slices.Clone(s.scrub), sub.made...))
	}
	if len(s.scrub) > 0 {
		wholeAnswers(req)
	}
	s.recordRequest(req, ic.proto, ic.host, ic.port, d, sub.injected, path)
	if len(sub.kept) > 0 {
		s.p.keptPlaceholders(ic.scheme(), ic.host, ic.port, req, sub.kept, path)
	}
	req.URL.Scheme, req.URL.Host = "", ""
	return s.exchange(req, ic.host, ic.port, key, reused)
}

// wholeAnswers asks, by req, for whole, plain answers: a value can be
// found in neither an encoded body nor a range of one (a sandbox could
// fetch a secret echoed back a few bytes at a time).
func wholeAnswers(req *http.Request) {
	req.Header.Del("Accept-Encoding")
	req.Header.Del("Range")
	req.Header.Del("If-Range")
}

// checkRequest applies pol to req, sent to host:port over the upstream
// connection s holds: the host rules, the address of the connection and,
// for a host with HTTP rules, those rules, after normalising req's path
// (which req then carries upstream). It answers a refusal itself, and
// returns the decision, whether the request may go on and, when it may
// not, whether the connection may carry another.
func (s *httpConn) checkRequest(req *http.Request, pol *Compiled, host string, port int) (d Decision, ok, keep bool) {
	np := ""
	if pol.hasHTTPRules(host, port) {
		raw := requestPath(req.RequestURI)
		if np, ok = NormalizePath(raw); !ok {
			keep = s.interceptRefusal(req, http.StatusBadRequest, ReasonBadPath, "", "tent: refused an ambiguous path (an encoded / or \\, a bad escape, a .. above the root)\n")
			return Decision{}, false, keep
		}
		if p, err := url.PathUnescape(np); err == nil {
			req.URL.Path, req.URL.RawPath = p, np
		}
	}
	d = pol.CheckRequest(host, port, req.Method, np)
	if d.Allowed && s.up != nil {
		if ad := pol.CheckAddr(s.up.addr, port); !ad.Allowed {
			d = ad
		}
	}
	if !d.Allowed {
		body := ""
		switch d.Reason {
		case ReasonHTTPRule:
			body = fmt.Sprintf("tent: blocked %s %s on %s: no HTTP rule of the sandbox's network policy allows it (this host's rules: %s)\n",
				recordMethod(req.Method), clampText(np, 256), net.JoinHostPort(normalizeHost(host), strconv.Itoa(port)), d.Rule)
		case ReasonPathParam:
			body = fmt.Sprintf("tent: blocked %s %s on %s: a ';' path parameter or an escaped '%%' past the path an HTTP rule names, which a server may read as another path (this host's rules: %s)\n",
				recordMethod(req.Method), clampText(np, 256), net.JoinHostPort(normalizeHost(host), strconv.Itoa(port)), d.Rule)
		}
		return d, false, s.interceptRefusal(req, http.StatusForbidden, d.Reason, d.Rule, body)
	}
	return d, true, false
}

// requestPath returns the path of a request target as the client sent
// it, escapes and all: origin form "/a/b?q" or absolute form
// "http://host/a/b?q" ("/" when it has none).
func requestPath(target string) string {
	if !strings.HasPrefix(target, "/") {
		if _, rest, ok := strings.Cut(target, "://"); ok {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				target = rest[i:]
			} else {
				target = "/"
			}
		}
	}
	target, _, _ = strings.Cut(target, "?")
	if target == "" {
		target = "/"
	}
	return target
}

// recordRequest audits an allowed request.
// path is recordPath of the request as the sandbox sent it.
func (s *httpConn) recordRequest(req *http.Request, proto, host string, port int, d Decision, secrets []string, path string) {
	if s.icpt != nil {
		proto = s.icpt.scheme()
	}
	s.p.record(AuditRecord{Event: EventRequest, Proto: proto, Host: recordHost(host), Port: port, Verdict: VerdictAllow,
		Rule: d.Rule, Reason: d.Reason, Method: recordMethod(req.Method), Path: path, Secrets: secrets})
}

// interceptRefusal answers a request the proxy refuses with code, audits
// it and counts it in the denials; the connection stays open after a 403
// when the request had no body to speak of. An empty body gets a default.
func (s *httpConn) interceptRefusal(req *http.Request, code int, reason, rule, body string) bool {
	host, port := "", 0
	proto := "http"
	if s.icpt != nil {
		host, port, proto = s.icpt.host, s.icpt.port, s.icpt.scheme()
	} else if h, pt, err := splitHostPort(req.URL.Host, 80); err == nil {
		host, port = recordHost(h), pt
	}
	s.p.record(AuditRecord{Event: EventRequest, Proto: proto, Host: host, Port: port, Verdict: VerdictDeny,
		Rule: rule, Reason: reason, Method: recordMethod(req.Method), Path: recordPath(req)})
	s.p.denials.add(host, port, reason)
	if body == "" {
		body = denialText(&refusal{host: host, port: port, d: Decision{Rule: rule, Reason: reason}})
	}
	if rule == "" {
		rule = "none"
	}
	keep := !req.Close && code == http.StatusForbidden
	if keep && req.Body != nil && req.Body != http.NoBody {
		n, _ := io.Copy(io.Discard, io.LimitReader(req.Body, maxDrain+1))
		keep = n <= maxDrain
	}
	return s.reply(code, []string{"X-Tent-Denied", reason + "; rule=" + rule}, body, !keep)
}

// keptPlaceholders audits and logs the placeholders a request carried to
// a host their secrets are not bound to (or over plain HTTP): they were
// sent as they are. path is recordPath of the request as the sandbox
// sent it.
func (p *Proxy) keptPlaceholders(proto, host string, port int, req *http.Request, names []string, path string) {
	p.record(AuditRecord{Event: EventRequest, Proto: proto, Host: recordHost(host), Port: port, Verdict: VerdictAllow,
		Method: recordMethod(req.Method), Path: path, Reason: "placeholders kept: not a host of their secrets", Kept: names})
	level := slog.LevelDebug // once per proxy as a warning: a sandbox could flood the log
	if p.count.keptWarned.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	p.log.Log(context.Background(), level, "netpolicy: a request carried the placeholder of a secret to a host it is not bound to, or in clear text; sent as a placeholder (further ones are debug records)",
		"sandbox", p.id, "host", recordHost(host), "port", port, "secrets", names)
}

// sameHost reports whether hostport (a Host header or URL host) names
// host, on port or without a port.
func sameHost(hostport, host string, port int) bool {
	h, pt, err := splitHostPort(hostport, port)
	return err == nil && normalizeHost(h) == host && pt == port
}

// hasField reports whether head (a request head as read) has a header
// field called name (lower case).
func hasField(head []byte, name string) bool {
	lines := bytes.Split(head, []byte("\n"))
	for _, line := range lines[1:] { // after the request line
		if len(bytes.TrimSpace(line)) == 0 {
			break // the end of the head
		}
		if k, _, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(bytes.TrimSpace(k)), name) {
			return true
		}
	}
	return false
}

// recordMethod and recordPath are what audit records keep of a request:
// the method and the path without its query (which may carry anything),
// escaped and cut.
func recordMethod(m string) string { return clampText(m, 32) }

func recordPath(req *http.Request) string {
	p := req.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	return clampText(p, 512)
}
