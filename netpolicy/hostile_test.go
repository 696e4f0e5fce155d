package netpolicy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The secrets of the hostile-origin tests: TOKEN's value is made of
// header-name characters (so an origin can put it in a field name), KEY's
// has '/', '+' and '=' (which a URL and base64 read otherwise) and goes
// in URLs.
const (
	hostileToken   = "hv+S3CR3T~value.never_inside"
	hostileTokenPH = "tent_11111111111111111111111111111111_ph"
	hostileKey     = "pk/S3CR3T/path=value+more"
	hostileKeyPH   = "tent_22222222222222222222222222222222_ph"
)

// hostileOrigin is an HTTPS (and plain HTTP) server that answers every
// request with the raw bytes its handler returns (then closes the
// connection if they say "Connection: close"): status lines, header
// lines and framing an http.Handler could not write. It records the
// requests it got.
type hostileOrigin struct {
	port, plainPort int
	roots           *x509.CertPool
	handle          func(r *http.Request) string
	mu              sync.Mutex
	got             []*http.Request
	lastAuth        string // the last Authorization it received, as an origin that keeps it
	certName        string // if set, the name its certificates are for (else the one asked for)
	wg              sync.WaitGroup
}

func newHostileOrigin(t *testing.T, handle func(o *hostileOrigin, r *http.Request) string) *hostileOrigin {
	t.Helper()
	upCA, err := NewCA("hostile-upstream")
	if err != nil {
		t.Fatal(err)
	}
	o := &hostileOrigin{roots: x509.NewCertPool()}
	o.roots.AddCert(upCA.Certificate())
	o.handle = func(r *http.Request) string { return handle(o, r) }
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		o.mu.Lock()
		name := h.ServerName
		if o.certName != "" {
			name = o.certName
		}
		o.mu.Unlock()
		return upCA.leaf(name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.port, o.plainPort = tl.Addr().(*net.TCPAddr).Port, pl.Addr().(*net.TCPAddr).Port
	for _, l := range []net.Listener{tl, pl} {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				o.wg.Add(1)
				go func() {
					defer o.wg.Done()
					o.serve(c)
				}()
			}
		}()
	}
	t.Cleanup(func() {
		tl.Close()
		pl.Close()
		o.wg.Wait()
	})
	return o
}

// serve answers the requests of c until an answer says "Connection:
// close" (or c ends).
func (o *hostileOrigin) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		o.mu.Lock()
		o.got = append(o.got, req)
		if a := req.Header.Get("Authorization"); a != "" {
			o.lastAuth = a
		}
		o.mu.Unlock()
		answer := o.handle(req)
		io.WriteString(c, answer)
		if strings.Contains(answer, "Connection: close\r\n") {
			return
		}
	}
}

func (o *hostileOrigin) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.got)
}

func (o *hostileOrigin) last(t *testing.T) *http.Request {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		t.Fatal("the origin received nothing")
	}
	return o.got[len(o.got)-1]
}

// hostileHarness is a proxy allowing api.example.com (TOKEN and KEY bound
// to it, KEY in URLs) and, by HTTP rule, GET and HEAD under /repos/org/
// of rules.example.com and GET under /api;v=2/ of matrix.example.com; all
// resolve to the origin.
func newHostileHarness(t *testing.T, o *hostileOrigin, set ...func(*ProxyConfig)) *interceptHarness {
	t.Helper()
	ih := &interceptHarness{}
	var err error
	if ih.ca, err = NewCA("sbx-hostile"); err != nil {
		t.Fatal(err)
	}
	ih.pool = x509.NewCertPool()
	ih.pool.AddCert(ih.ca.Certificate())
	pol, err := Compile(Policy{Mode: Limited,
		AllowedHosts: []string{"api.example.com", "GET,HEAD rules.example.com/repos/org/", "GET matrix.example.com/api;v=2/", "127.0.0.1"},
		Secrets: []Secret{
			{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: hostileToken, Placeholder: hostileTokenPH},
			{Name: "KEY", Hosts: []string{"api.example.com"}, Value: hostileKey, Placeholder: hostileKeyPH, InURL: true},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ih.harness = newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.Policy, c.CA, c.UpstreamRoots = pol, ih.ca, o.roots
		for _, f := range set {
			f(c)
		}
	})
	for _, n := range []string{"api.example.com", "rules.example.com", "matrix.example.com"} {
		ih.res.set(n, "127.0.0.1")
	}
	ih.o = &recOrigin{port: o.port}
	return ih
}

// plainExchange sends raw to the proxy's HTTP listener (plain
// forwarding or CONNECT) and returns all it answers until it closes.
func (ih *interceptHarness) plainExchange(t *testing.T, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", ih.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// rawExchange sends head on a new intercepted connection to name and
// returns every byte the sandbox's side got back until the proxy closed
// it (the request asks for Connection: close).
func (ih *interceptHarness) rawExchange(t *testing.T, name, head string) string {
	t.Helper()
	tc, err := ih.dialTLS(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(tc, head); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tc)
	return string(b)
}

// valueForms are the forms of the secrets' values no byte the sandbox
// receives may hold: as they are (in any case: a header name is
// re-cased), percent-encoded (either case of hex digit), and inside any
// base64 the proxy made of them.
func valueForms() map[string]string {
	forms := map[string]string{}
	for _, v := range []string{hostileToken, hostileKey} {
		forms[strings.ToLower(v)] = "raw " + v
		forms[strings.ToLower(url.PathEscape(v))] = "path-escaped " + v
		forms[strings.ToLower(url.QueryEscape(v))] = "query-escaped " + v
		forms[strings.ToLower(pathEscape(v))] = "escaped " + v
		for _, user := range []string{"user:", "x-access-token:"} {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
				forms[strings.ToLower(enc.EncodeToString([]byte(user+v)))] = "base64 of " + user + v
			}
		}
	}
	return forms
}

// b64Cores are the base64 characters (standard and URL alphabets) that
// depend on v's bytes alone, wherever v starts in what is encoded.
func b64Cores(v string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for off := range 3 {
			s := enc.EncodeToString(append(make([]byte, off), v...))
			out = append(out, s[(8*off+5)/6:(8*(off+len(v)))/6])
		}
	}
	return out
}

func (ih *interceptHarness) auditText() string {
	ih.audit.mu.Lock()
	defer ih.audit.mu.Unlock()
	return ih.audit.b.String()
}

// assertNoValue fails t if got holds any form of a value.
func assertNoValue(t *testing.T, what, got string) {
	t.Helper()
	low := strings.ToLower(got)
	for f, name := range valueForms() {
		if strings.Contains(low, f) {
			t.Errorf("%s: the sandbox received the %s:\n%s", what, name, got)
		}
	}
}

// TestHostileOriginCertificateName: an origin whose certificate names
// the value (it learnt it from an earlier request) makes tent refuse the
// connection without quoting the name, to the sandbox or in the log.
func TestHostileOriginCertificateName(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	})
	// The origin's CA would sign anything: a certificate for the value's
	// name, on a port of the bound host.
	upCA, err := NewCA("hostile-upstream-2")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := upCA.leaf(hostileToken + ".example.com")
	if err != nil {
		t.Fatal(err)
	}
	o.roots.AddCert(upCA.Certificate())
	ih := newHostileHarness(t, o)
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { tl.Close(); <-done }()
	go func() {
		defer close(done)
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	target := "api.example.com:" + strconv.Itoa(tl.Addr().(*net.TCPAddr).Port)
	raw := ih.plainExchange(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, target))
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("%v: %q", err, raw)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT: %s", resp.Status)
	}
	assertNoValue(t, "CONNECT refusal", string(raw))
	if !strings.Contains(string(body), "certificate is valid for "+hostileTokenPH+".example.com") {
		t.Errorf("CONNECT refusal %q: want the error with the placeholder in the value's place", body)
	}
	ih.proxy.Close()
	assertNoValue(t, "network log", ih.auditText())
}

// TestHTTPRulePathParameters: servers such as Tomcat, Jetty and Spring
// drop ";..." path parameters before routing, so "/repos/org/..;/other"
// reads "/repos/other": a path rule refuses a ';' (or its escape, or an
// escaped '%') past what the rule names, with a 403.
func TestHTTPRulePathParameters(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	})
	ih := newHostileHarness(t, o)
	for _, path := range []string{"/repos/org/..;/other/x", "/repos/org/.;/x", "/repos/org/x;a=b", "/repos/org/%2e%2e;/other", "/repos/org/..%3B/other", "/repos/org/..%3b/other", "/repos/org/%252e%252e/other"} {
		n := o.count()
		got := ih.rawExchange(t, "rules.example.com", "GET "+path+" HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Tent-Denied") != ReasonPathParam+"; rule=GET,HEAD rules.example.com/repos/org/" {
			t.Errorf("%s: %s %q, want 403 %q", path, resp.Status, resp.Header.Get("X-Tent-Denied"), ReasonPathParam)
		}
		if o.count() != n {
			t.Errorf("%s: the origin received it", path)
		}
	}
	// An overlong UTF-8 dot (old Tomcat read "%c0%ae" as ".") is refused
	// as the other ambiguous paths are.
	for _, path := range []string{"/repos/org/%c0%ae%c0%ae/other", "/repos/org/%C0%AE./x", "/repos/org/%ff/x"} {
		got := ih.rawExchange(t, "rules.example.com", "GET "+path+" HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Tent-Denied") != ReasonBadPath+"; rule=none" {
			t.Errorf("%s: %s %q, want 400 %q", path, resp.Status, resp.Header.Get("X-Tent-Denied"), ReasonBadPath)
		}
	}
	if got := ih.rawExchange(t, "rules.example.com", "GET /repos/org/caf%C3%A9 HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Errorf("an escaped UTF-8 name: %q", got)
	}
	// Where the rule names the parameter, it is what it allows.
	for path, code := range map[string]int{"/api;v=2/items": 200, "/api;v=2/items;x": 403, "/api;v=3/items": 403, "/repos/org/x": 403} {
		got := ih.rawExchange(t, "matrix.example.com", "GET "+path+" HTTP/1.1\r\nHost: matrix.example.com\r\nConnection: close\r\n\r\n")
		if want := "HTTP/1.1 " + strconv.Itoa(code) + " "; !strings.HasPrefix(got, want) {
			t.Errorf("matrix %s: %q, want %s", path, got, want)
		}
	}
	if got := ih.rawExchange(t, "rules.example.com", "GET /repos/org/x HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Errorf("an allowed path: %q", got)
	}
}

// TestHostileOriginCertificateNameAfterRedial: on an intercepted
// connection whose upstream connection ended, the next request dials
// again; a certificate naming the value then is tent's 502, which quotes
// its names with the placeholder in the value's place.
func TestHostileOriginCertificateNameAfterRedial(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		o.certName = hostileToken + ".example.com" // o.mu is held
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	})
	ih := newHostileHarness(t, o)
	tc, err := ih.dialTLS("api.example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(tc)
	io.WriteString(tc, "GET /first HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	io.WriteString(tc, "GET /second HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	rest, _ := io.ReadAll(br)
	assertNoValue(t, "re-dial refusal", string(rest))
	if !strings.HasPrefix(string(rest), "HTTP/1.1 502 Bad Gateway\r\n") || !strings.Contains(string(rest), "certificate is valid for "+hostileTokenPH+".example.com") {
		t.Errorf("got\n%s\nwant a 502 naming the certificate's name with the placeholder", rest)
	}
	ih.proxy.Close()
	assertNoValue(t, "network log", ih.auditText())
}
