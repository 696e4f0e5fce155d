package netpolicy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testSecret      = "s3cr3t-VALUE-never-inside"
	testPlaceholder = "tent_0123456789abcdef0123456789abcdef_ph"
)

// seen is one request a recording origin received.
type seen struct {
	Method, Host, URI, Auth, APIKey string
}

// recOrigin is an HTTPS server for any name, with certificates from its
// own CA (the "public" roots the proxy is given), that records what it
// receives.
type recOrigin struct {
	srv   *httptest.Server
	port  int
	roots *x509.CertPool
	mu    sync.Mutex
	got   []seen
}

func newRecOrigin(t testing.TB, ca *CA) *recOrigin {
	t.Helper()
	o := &recOrigin{roots: x509.NewCertPool()}
	o.roots.AddCert(ca.Certificate())
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.got = append(o.got, seen{r.Method, r.Host, r.RequestURI, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")})
		o.mu.Unlock()
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/echo": // what an echo API or a verbose error page does
			w.Header().Set("X-Echo", auth)
			w.Header().Set("Content-Length", strconv.Itoa(len("you sent ")+len(auth)))
			fmt.Fprintf(w, "you sent %s", auth)
		case "/echo-split": // the value across two writes (and reads)
			io.WriteString(w, auth[:len(auth)-5])
			w.(http.Flusher).Flush()
			io.WriteString(w, auth[len(auth)-5:]+"\n")
		case "/echo-gzip": // compressed although not asked for
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "you sent %s", auth)
			zw.Close()
		case "/close": // the server ends every connection after its answer
			w.Header().Set("Connection", "close")
			fmt.Fprintf(w, "ok %s", auth)
		case "/echo-br":
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, auth)
		default:
			fmt.Fprintf(w, "ok %s", r.URL.Path)
		}
	}))
	o.srv.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.leaf(hello.ServerName)
	}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	o.port = port(t, o.srv.URL)
	return o
}

func (o *recOrigin) last(t *testing.T) seen {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		t.Fatal("the origin received nothing")
	}
	return o.got[len(o.got)-1]
}

func (o *recOrigin) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.got)
}

// interceptHarness is a proxy whose policy allows api.example.com,
// other.example.com and, by HTTP rule, GET and HEAD under /repos/org/ of
// rules.example.com, with the secret TOKEN bound to api.example.com; all
// three names resolve to the recording origin.
type interceptHarness struct {
	*harness
	o    *recOrigin
	ca   *CA            // the proxy's
	pool *x509.CertPool // trusts the proxy's CA
}

func newInterceptHarness(t *testing.T, inURL bool, extra ...string) *interceptHarness {
	t.Helper()
	upCA, err := NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	ih := &interceptHarness{o: newRecOrigin(t, upCA)}
	if ih.ca, err = NewCA("sbx-test"); err != nil {
		t.Fatal(err)
	}
	ih.pool = x509.NewCertPool()
	ih.pool.AddCert(ih.ca.Certificate())
	pol, err := Compile(Policy{Mode: Limited,
		AllowedHosts: append([]string{"api.example.com", "other.example.com", "GET,HEAD rules.example.com/repos/org/", "127.0.0.1"}, extra...),
		Secrets:      []Secret{{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: testSecret, Placeholder: testPlaceholder, InURL: inURL}}})
	if err != nil {
		t.Fatal(err)
	}
	ih.harness = newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.Policy, c.CA, c.UpstreamRoots = pol, ih.ca, ih.o.roots
	})
	for _, n := range []string{"api.example.com", "other.example.com", "rules.example.com", "plain.example.com"} {
		ih.res.set(n, "127.0.0.1")
	}
	return ih
}

// dialTLS opens a CONNECT tunnel to name on the origin's port and starts
// TLS in it with cfg (server name and the proxy's CA by default).
func (ih *interceptHarness) dialTLS(name string, cfg *tls.Config) (*tls.Conn, error) {
	c, _, resp := ih.connect(fmt.Sprintf("%s:%d", name, ih.o.port))
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = name
	}
	if cfg.RootCAs == nil {
		cfg.RootCAs = ih.pool
	}
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// raw sends a raw request head (and body) on a new intercepted
// connection to name and returns the response.
func (ih *interceptHarness) raw(t *testing.T, name string, parts ...string) (*http.Response, string) {
	t.Helper()
	tc, err := ih.dialTLS(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	for _, p := range parts { // each part its own write (and TLS record)
		if _, err := io.WriteString(tc, p); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (ih *interceptHarness) noValueAnywhere(t *testing.T) {
	t.Helper()
	ih.audit.mu.Lock()
	log := ih.audit.b.String()
	ih.audit.mu.Unlock()
	if strings.Contains(log, testSecret) {
		t.Errorf("the audit log holds the secret's value:\n%s", log)
	}
	if d := fmt.Sprintf("%v %+v %#v", ih.proxy.Denied(), ih.proxy.Policy().Policy(), ih.proxy.Policy().Secrets()); strings.Contains(d, testSecret) {
		t.Errorf("the denials or the printed policy hold the value: %s", d)
	}
	j, err := json.Marshal(ih.proxy.Policy().Policy())
	if err != nil || strings.Contains(string(j), testSecret) || !strings.Contains(string(j), `"placeholder":"`+testPlaceholder+`"`) || !strings.Contains(string(j), `"name":"TOKEN"`) {
		t.Errorf("the policy in JSON: %s %v", j, err)
	}
	var logged bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logged, nil), slog.NewJSONHandler(&logged, nil)} {
		slog.New(h).Info("policy", "policy", ih.proxy.Policy().Policy(), "secret", ih.proxy.Policy().Secrets()[0])
	}
	if strings.Contains(logged.String(), testSecret) {
		t.Errorf("a log record holds the value: %s", logged.String())
	}
}

func TestSecretInjectedOnlyForBoundHost(t *testing.T) {
	ih := newInterceptHarness(t, false)
	c := ih.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ih.pool}})
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + testPlaceholder))
	url := fmt.Sprintf("https://api.example.com:%d/user?q=%s", ih.o.port, testPlaceholder)
	resp, body := get(t, c, url, "Authorization", "Bearer "+testPlaceholder, "X-Api-Key", "k="+testPlaceholder)
	if resp.StatusCode != 200 || body != "ok /user" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	got := ih.o.last(t)
	if got.Auth != "Bearer "+testSecret || got.APIKey != "k="+testSecret {
		t.Errorf("api.example.com received %+v, want the value in both headers", got)
	}
	if got.URI != "/user?q="+testPlaceholder {
		t.Errorf("URI %q: the placeholder must stay in a URL unless the secret asks for it", got.URI)
	}
	// Basic auth is decoded, rewritten and encoded again.
	get(t, c, fmt.Sprintf("https://api.example.com:%d/basic", ih.o.port), "Authorization", "Basic "+basic)
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testSecret))
	if got := ih.o.last(t); got.Auth != want {
		t.Errorf("basic auth arrived as %q, want %q", got.Auth, want)
	}
	// Another allowed host, intercepted or not, gets the placeholder.
	for _, name := range []string{"other.example.com", "rules.example.com"} {
		path := "/x"
		if name == "rules.example.com" {
			path = "/repos/org/x"
		}
		c := ih.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ih.o.roots}})
		if name == "rules.example.com" {
			c = ih.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ih.pool}})
		}
		resp, _ := get(t, c, fmt.Sprintf("https://%s:%d%s", name, ih.o.port, path), "Authorization", "Bearer "+testPlaceholder)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", name, resp.Status)
		}
		if got := ih.o.last(t); got.Auth != "Bearer "+testPlaceholder {
			t.Errorf("%s received %q, want the placeholder", name, got.Auth)
		}
	}
	ih.proxy.Close()
	var injected, kept bool
	for _, r := range ih.audit.records(t) {
		if r.Event == EventRequest && r.Host == "api.example.com" && r.Method == "GET" && r.Path == "/user" && len(r.Secrets) == 1 && r.Secrets[0] == "TOKEN" {
			injected = true
		}
		if r.Event == EventRequest && r.Host == "rules.example.com" && len(r.Kept) == 1 && r.Kept[0] == "TOKEN" {
			kept = true
		}
	}
	if !injected || !kept {
		t.Errorf("audit: injected record %v, kept record %v: %+v", injected, kept, ih.audit.records(t))
	}
	ih.noValueAnywhere(t)
}

func TestSecretInURLWhenAsked(t *testing.T) {
	ih := newInterceptHarness(t, true)
	resp, _ := ih.raw(t, "api.example.com", "GET /v1/"+testPlaceholder+"/x?key="+testPlaceholder+" HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if got := ih.o.last(t); got.URI != "/v1/"+testSecret+"/x?key="+testSecret {
		t.Errorf("URI %q, want the value in path and query", got.URI)
	}
}

func TestSecretPlaceholderSplitAcrossWrites(t *testing.T) {
	ih := newInterceptHarness(t, false)
	half := len(testPlaceholder) / 2
	resp, _ := ih.raw(t, "api.example.com",
		"GET /split HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+testPlaceholder[:half],
		testPlaceholder[half:]+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if got := ih.o.last(t); got.Auth != "Bearer "+testSecret {
		t.Errorf("Authorization %q, want the value", got.Auth)
	}
}

func TestSecretNotInjectedInClearText(t *testing.T) {
	ih := newInterceptHarness(t, false)
	plain := newOrigin(t, false)
	ih.res.set("api.example.com", "127.0.0.1")
	c := ih.client(nil)
	resp, body := get(t, c, fmt.Sprintf("http://api.example.com:%d/", plain.port), "Proxy-Authorization", "x", "X-Hop", testPlaceholder)
	if resp.StatusCode != 200 || !strings.Contains(body, "hop=\""+testPlaceholder+"\"") {
		t.Fatalf("%s %q: a placeholder in clear text must reach the host unchanged", resp.Status, body)
	}
	ih.proxy.Close()
	found := false
	for _, r := range ih.audit.records(t) {
		found = found || (r.Event == EventRequest && r.Proto == "http" && len(r.Kept) == 1)
	}
	if !found {
		t.Errorf("no record of the kept placeholder: %+v", ih.audit.records(t))
	}
	ih.noValueAnywhere(t)
}

func TestHTTPRuleMethodAndPath(t *testing.T) {
	ih := newInterceptHarness(t, false)
	const rule = "GET,HEAD rules.example.com/repos/org/"
	for _, tc := range []struct {
		method, path string
		code         int
		reason       string
		upstream     string // the path the origin must see
	}{
		{"GET", "/repos/org/a", 200, "", "/repos/org/a"},
		{"HEAD", "/repos/org/", 200, "", "/repos/org/"},
		{"GET", "/repos/org/./a//b", 200, "", "/repos/org/a/b"},
		{"GET", "/repos/%6Frg/a", 200, "", "/repos/org/a"},
		{"POST", "/repos/org/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/orgx/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/../other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/%2e%2e/other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/%2E%2e/%2e%2E/x", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org%2F..%2Fother/a", 400, ReasonBadPath, ""},
		{"GET", "/repos/org/..%2f../x", 400, ReasonBadPath, ""},
		{"GET", "/repos/org/a%5c..%5c..%5cx", 400, ReasonBadPath, ""},
		{"GET", "/../../repos/org/a", 400, ReasonBadPath, ""},
	} {
		before := ih.o.count()
		resp, body := ih.raw(t, "rules.example.com", tc.method+" "+tc.path+" HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %s %q, want %d", tc.method, tc.path, resp.Status, body, tc.code)
			continue
		}
		if tc.code != 200 {
			d := resp.Header.Get("X-Tent-Denied")
			wantRule := "none"
			if tc.reason == ReasonHTTPRule {
				wantRule = rule
				if !strings.Contains(body, rule) {
					t.Errorf("%s %s: the body does not name the rule: %q", tc.method, tc.path, body)
				}
			}
			if d != tc.reason+"; rule="+wantRule {
				t.Errorf("%s %s: X-Tent-Denied %q", tc.method, tc.path, d)
			}
			if ih.o.count() != before {
				t.Errorf("%s %s: refused, yet the origin received it", tc.method, tc.path)
			}
			continue
		}
		if got := ih.o.last(t); got.URI != tc.upstream || got.Method != tc.method {
			t.Errorf("%s %s: the origin saw %s %s, want %s", tc.method, tc.path, got.Method, got.URI, tc.upstream)
		}
	}
	// Plain HTTP to the same host is held to the same rules.
	plain := newOrigin(t, false)
	c := ih.client(nil)
	resp, _ := get(t, c, fmt.Sprintf("http://rules.example.com:%d/other", plain.port))
	if resp.StatusCode != 403 || resp.Header.Get("X-Tent-Denied") != ReasonHTTPRule+"; rule="+rule {
		t.Errorf("plain HTTP outside the rule: %s %q", resp.Status, resp.Header.Get("X-Tent-Denied"))
	}
	resp, _ = get(t, c, fmt.Sprintf("http://rules.example.com:%d/repos/org/x", plain.port))
	if resp.StatusCode != 200 {
		t.Errorf("plain HTTP inside the rule: %s", resp.Status)
	}
	ih.proxy.Close()
	var logged bool
	for _, r := range ih.audit.records(t) {
		logged = logged || (r.Event == EventRequest && r.Verdict == VerdictDeny && r.Method == "POST" && r.Path == "/repos/org/a" && r.Reason == ReasonHTTPRule)
	}
	if !logged {
		t.Errorf("no audit record of the refused POST with its method and path")
	}
	if !strings.Contains(Summary(ih.proxy.Denied()), "rules.example.com") {
		t.Errorf("Summary %q", Summary(ih.proxy.Denied()))
	}
}

func TestInterceptRefusesSNIMismatch(t *testing.T) {
	ih := newInterceptHarness(t, false)
	// CONNECT to a host that is intercepted, TLS naming another one.
	_, err := ih.dialTLS("api.example.com", &tls.Config{ServerName: "other.example.com"})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("handshake with a mismatched server name: %v, want a TLS alert", err)
	}
	if ih.o.count() != 0 {
		t.Error("the origin received a request")
	}
	ih.proxy.Close()
	found := false
	for _, r := range ih.audit.records(t) {
		found = found || (r.Verdict == VerdictDeny && strings.HasPrefix(r.Reason, ReasonHostMismatch))
	}
	if !found {
		t.Errorf("no denial record: %+v", ih.audit.records(t))
	}
}

func TestInterceptRefusesHostHeaderMismatch(t *testing.T) {
	ih := newInterceptHarness(t, false)
	for _, head := range []string{
		"GET / HTTP/1.1\r\nHost: other.example.com\r\nAuthorization: Bearer " + testPlaceholder + "\r\n\r\n",
		"GET https://other.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
	} {
		resp, body := ih.raw(t, "api.example.com", head)
		if resp.StatusCode != 403 || !strings.HasPrefix(resp.Header.Get("X-Tent-Denied"), ReasonHostMismatch) {
			t.Errorf("%q: %s %q %q", head, resp.Status, resp.Header.Get("X-Tent-Denied"), body)
		}
	}
	if ih.o.count() != 0 {
		t.Error("the origin received a request")
	}
}

func TestInterceptRefusesSmuggling(t *testing.T) {
	ih := newInterceptHarness(t, false)
	for _, fields := range []string{
		"Content-Length: 4\r\nTransfer-Encoding: chunked",
		"transfer-encoding: chunked\r\ncontent-length: 4",
	} {
		resp, _ := ih.raw(t, "api.example.com", "POST / HTTP/1.1\r\nHost: api.example.com\r\n"+fields+"\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		if resp.StatusCode != 400 || resp.Header.Get("X-Tent-Denied") != ReasonSmuggling+"; rule=none" {
			t.Errorf("%q: %s %q", fields, resp.Status, resp.Header.Get("X-Tent-Denied"))
		}
	}
	if ih.o.count() != 0 {
		t.Error("the origin received a request")
	}
}

func TestInterceptHTTP2AndUpgrades(t *testing.T) {
	ih := newInterceptHarness(t, false)
	// ALPN offers http/1.1 only: an h2-only client cannot connect...
	if _, err := ih.dialTLS("api.example.com", &tls.Config{NextProtos: []string{"h2"}}); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("h2-only client: %v", err)
	}
	// ...and one that offers both gets http/1.1.
	tc, err := ih.dialTLS("api.example.com", &tls.Config{NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("negotiated %q", p)
	}
	tc.Close()
	// Prior-knowledge HTTP/2 and upgrades are refused.
	for _, head := range []string{
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
	} {
		tc, err := ih.dialTLS("api.example.com", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(tc, head)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		tc.Close()
		if err != nil {
			t.Errorf("%q: %v", head, err)
			continue
		}
		if head[:3] == "PRI" {
			if resp.StatusCode != 400 && resp.StatusCode != 501 {
				t.Errorf("%q: %s", head, resp.Status)
			}
			continue
		}
		if resp.StatusCode != 501 || resp.Header.Get("X-Tent-Denied") != ReasonUpgrade+"; rule=none" {
			t.Errorf("%q: %s %q", head, resp.Status, resp.Header.Get("X-Tent-Denied"))
		}
	}
	if ih.o.count() != 0 {
		t.Error("the origin received a request")
	}
}

func TestInterceptRefusesBadUpstreamCertificate(t *testing.T) {
	ih := newInterceptHarness(t, false)
	ih.proxy.roots = x509.NewCertPool() // the origin's CA is no longer trusted
	c, _, resp := ih.connect(fmt.Sprintf("api.example.com:%d", ih.o.port))
	c.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("CONNECT to a host with an untrusted certificate: %s, want 502", resp.Status)
	}
	ih.proxy.Close()
	found := false
	for _, r := range ih.audit.records(t) {
		found = found || (r.Verdict == VerdictError && strings.Contains(r.Reason, "certificate"))
	}
	if !found {
		t.Errorf("no error record naming the certificate: %+v", ih.audit.records(t))
	}
}

func TestNotInterceptedHostKeepsItsCertificate(t *testing.T) {
	ih := newInterceptHarness(t, false, "plain.example.com")
	// A client that pins the origin's own CA (and would refuse tent's)
	// works to a host nothing intercepts: the tunnel is end to end.
	tc, err := ih.dialTLS("plain.example.com", &tls.Config{RootCAs: ih.o.roots})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if issuer := tc.ConnectionState().PeerCertificates[0].Issuer.CommonName; !strings.Contains(issuer, "upstream") {
		t.Errorf("issuer %q, want the origin's own CA", issuer)
	}
	// An intercepted host presents a certificate of the proxy's CA.
	tc2, err := ih.dialTLS("api.example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc2.Close()
	if issuer := tc2.ConnectionState().PeerCertificates[0].Issuer.CommonName; !strings.Contains(issuer, "sbx-test") {
		t.Errorf("issuer %q, want the proxy's CA", issuer)
	}
	// A program pinning the origin's CA cannot talk to an intercepted
	// host, and the log says why.
	if _, err := ih.dialTLS("api.example.com", &tls.Config{RootCAs: ih.o.roots}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a pinned client to an intercepted host: %v", err)
	}
	ih.proxy.Close()
	found := false
	for _, r := range ih.audit.records(t) {
		found = found || (r.Verdict == VerdictError && strings.Contains(r.Reason, "trust the proxy's CA"))
	}
	if !found {
		t.Errorf("no record of the failed handshake: %+v", ih.audit.records(t))
	}
}

func TestSecretOverSOCKS5(t *testing.T) {
	ih := newInterceptHarness(t, false)
	c, code := ih.socks5("api.example.com", ih.o.port)
	if code != 0 {
		t.Fatalf("SOCKS5 reply %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.example.com", RootCAs: ih.pool})
	defer tc.Close()
	fmt.Fprintf(tc, "GET /s HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: token %s\r\nConnection: close\r\n\r\n", testPlaceholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := ih.o.last(t); got.Auth != "token "+testSecret {
		t.Errorf("Authorization %q", got.Auth)
	}
}

func TestSecretNoCARefuses(t *testing.T) {
	ih := newInterceptHarness(t, false)
	ih.proxy.ca = nil
	c, _, resp := ih.connect(fmt.Sprintf("api.example.com:%d", ih.o.port))
	c.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("%s, want 502", resp.Status)
	}
	if ih.o.count() != 0 {
		t.Error("the origin received a request")
	}
}

func TestSecretPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		s    Secret
		want string
	}{
		{Secret{Name: "1X", Hosts: []string{"a.example"}, Value: "value-0123456789"}, "name"},
		{Secret{Name: "X", Hosts: []string{"a.example"}, Value: "abc12"}, "shorter than 8"},
		{Secret{Name: "X", Hosts: []string{"a.example"}, Value: "a\r\nInjected: 1"}, "CR, LF"},
		{Secret{Name: "X", Value: "value-0123456789"}, "names no host"},
		{Secret{Name: "X", Hosts: []string{"10.0.0.1"}, Value: "value-0123456789"}, "not IP addresses"},
		{Secret{Name: "X", Hosts: []string{"*.com"}, Value: "value-0123456789"}, "public suffix"},
	} {
		_, err := Compile(Policy{Mode: Limited, Secrets: []Secret{tc.s}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.s, err, tc.want)
		}
		if err != nil && tc.s.Value != "" && strings.Contains(err.Error(), tc.s.Value) && len(tc.s.Value) > 1 {
			t.Errorf("the error holds the value: %v", err)
		}
	}
	c, err := Compile(Policy{Mode: Limited, Secrets: []Secret{{Name: "A", Hosts: []string{"a.example"}, Value: "value-0123456789"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ph := c.Secrets()[0].Placeholder; !strings.HasPrefix(ph, "tent_") || len(ph) != placeholderLen {
		t.Errorf("placeholder %q", ph)
	}
	if !c.Intercepts("A.example.", 443) || c.Intercepts("b.example", 443) {
		t.Error("Intercepts")
	}
	if _, err := Compile(Policy{Mode: None, Secrets: []Secret{{Name: "A", Hosts: []string{"a.example"}, Value: "value-0123456789"}}}); err == nil {
		t.Error("secrets with mode none accepted")
	}
}

func TestHTTPRuleParse(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"GET,head api.github.com/repos/ORG/", "GET,HEAD api.github.com/repos/ORG/", ""},
		{"api.example.com/v1/", "api.example.com/v1/", ""},
		{"POST *.example.com:8443", "POST *.example.com:8443", ""},
		{"GET api.example.com/a/../b", "GET api.example.com/b", ""},
		{"GET api.example.com/", "GET api.example.com", ""},
		{"GET 10.0.0.1/x", "", "IP address"},
		{"CONNECT a.example", "", "CONNECT"},
		{"G(T a.example", "", "bad method"},
		{"a.example/x?y", "", "query"},
		{"a.example/%2F", "", "encoded"},
	} {
		r, isHTTP, err := ParseHTTPRule(tc.in)
		if !isHTTP {
			t.Errorf("%q: not an HTTP rule", tc.in)
			continue
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.in, r.String(), err, tc.want)
		}
	}
	for _, plain := range []string{"example.com", "10.0.0.0/8", "[2001:db8::/32]:443", "example.com:443"} {
		if _, isHTTP, _ := ParseHTTPRule(plain); isHTTP {
			t.Errorf("%q read as an HTTP rule", plain)
		}
	}
	c := mustCompile(t, []string{"GET a.example/x/", "b.example"}, nil)
	if d := c.CheckName("a.example", 443); !d.Allowed || d.Rule != "GET a.example/x/" {
		t.Errorf("CheckName %v", d)
	}
	if !c.Intercepts("a.example", 443) || c.Intercepts("b.example", 443) {
		t.Error("Intercepts")
	}
}

func TestSecretNeverEchoedBack(t *testing.T) {
	ih := newInterceptHarness(t, false)
	c := ih.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ih.pool}, DisableCompression: false})
	for _, path := range []string{"/echo", "/echo-split", "/echo-gzip"} {
		resp, body := get(t, c, fmt.Sprintf("https://api.example.com:%d%s", ih.o.port, path), "Authorization", "Bearer "+testPlaceholder)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		if got := ih.o.last(t); got.Auth != "Bearer "+testSecret {
			t.Fatalf("%s: the origin received %q", path, got.Auth)
		}
		if strings.Contains(body, testSecret) || strings.Contains(fmt.Sprint(resp.Header), testSecret) {
			t.Errorf("%s: the value came back: %q %v", path, body, resp.Header)
		}
		if !strings.Contains(body, "Bearer "+testPlaceholder) {
			t.Errorf("%s: body %q, want the placeholder in place of the value", path, body)
		}
		if path == "/echo" && resp.Header.Get("X-Echo") != "Bearer "+testPlaceholder {
			t.Errorf("X-Echo %q", resp.Header.Get("X-Echo"))
		}
	}
	resp, body := get(t, c, fmt.Sprintf("https://api.example.com:%d/echo-br", ih.o.port), "Authorization", "Bearer "+testPlaceholder)
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, testSecret) {
		t.Errorf("a body tent cannot read: %s %q, want 502", resp.Status, body)
	}
}

func TestScrubReaderSplits(t *testing.T) {
	pairs := []scrubPair{{[]byte("SECRET"), []byte("ph_long_placeholder")}, {[]byte("AB"), []byte("x")}}
	in := "..SECRET..SECRETSECRET.AB.SECRE"
	want := "..ph_long_placeholder..ph_long_placeholderph_long_placeholder.x.SECRE"
	for size := 1; size <= len(in); size++ {
		r := &scrubReader{r: &chunkReader{s: in, n: size}, pairs: pairs}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want {
			t.Errorf("reads of %d: %q %v, want %q", size, got, err, want)
		}
	}
}

// chunkReader returns s n bytes per read.
type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(b []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), c.n)], c.s)
	c.s = c.s[k:]
	return k, nil
}

func TestInterceptLeavesNothing(t *testing.T) {
	ih := newInterceptHarness(t, false)
	base := runtime.NumGoroutine()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ih.pool}}
	c := ih.client(tr)
	tr.DisableKeepAlives = false // an intercepted connection kept open at Close
	for range 3 {
		get(t, c, fmt.Sprintf("https://api.example.com:%d/x", ih.o.port), "Authorization", "Bearer "+testPlaceholder)
	}
	if ih.proxy.Active() == 0 {
		t.Fatal("no connection kept alive")
	}
	closeWithin(t, ih.proxy, 5*time.Second)
	tr.CloseIdleConnections()
	if n := ih.proxy.Active(); n != 0 {
		t.Errorf("%d connections left", n)
	}
	waitGoroutines(t, base)
}

// An upstream that closes after each response while the client keeps its
// connection: the next request gets a new upstream connection, checked
// and intercepted again.
func TestInterceptUpstreamClosesBetweenRequests(t *testing.T) {
	ih := newInterceptHarness(t, false)
	tc, err := ih.dialTLS("api.example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	br := bufio.NewReader(tc)
	for i := range 3 {
		fmt.Fprintf(tc, "GET /close HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer %s\r\n\r\n", testPlaceholder)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok Bearer "+testPlaceholder || resp.Close {
			t.Fatalf("request %d: %s %q close=%v", i, resp.Status, body, resp.Close)
		}
		if got := ih.o.last(t); got.Auth != "Bearer "+testSecret {
			t.Fatalf("request %d: the origin received %q", i, got.Auth)
		}
	}
	// Once the policy no longer allows the host, the next request is
	// refused though the client connection was open.
	ih.setPolicy([]string{"127.0.0.1"}, nil)
	fmt.Fprintf(tc, "GET /close HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Tent-Denied") != ReasonNotAllowed+"; rule=none" {
		t.Errorf("after the rule was removed: %s %q", resp.Status, resp.Header.Get("X-Tent-Denied"))
	}
}

// FuzzNormalizePath: a normalised path is its own normal form, starts
// with "/", and has no dot segment, empty segment, backslash or escaped
// slash left for a server to read otherwise.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b/", "/a/../b", "/%2e%2e/x", "/a//b/./c", "/%2F", "/a%5cb", "/%zz", "/a/%2E%2e/", "/~%41%7e", "/a?b", "/.%2e/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		np, ok := NormalizePath(p)
		if !ok {
			return
		}
		again, ok := NormalizePath(np)
		if !ok || again != np {
			t.Fatalf("%q -> %q -> %q %v", p, np, again, ok)
		}
		if np[0] != '/' || strings.Contains(np, "//") || strings.Contains(np, "\\") || strings.Contains(strings.ToUpper(np), "%2F") {
			t.Fatalf("%q -> %q", p, np)
		}
		for _, seg := range strings.Split(np[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q -> %q keeps a dot segment", p, np)
			}
		}
	})
}

// A host nothing intercepts that wants a client certificate (mTLS) gets
// it: the tunnel is end to end, so the program's own key signs the
// handshake.
func TestNotInterceptedHostKeepsMutualTLS(t *testing.T) {
	ih := newInterceptHarness(t, false, "mtls.example.com")
	clientCA, err := NewCA("client")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := clientCA.leaf("client.example")
	if err != nil {
		t.Fatal(err)
	}
	clientPool := x509.NewCertPool()
	clientPool.AddCert(clientCA.Certificate())
	upCA, err := NewCA("mtls-upstream")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	// The server demands a certificate of the client's CA (the test's
	// certificates are minted for servers, so any key usage is accepted).
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.leaf(h.ServerName) },
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: clientPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		}}
	srv.StartTLS()
	defer srv.Close()
	ih.res.set("mtls.example.com", "127.0.0.1")
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	c := ih.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{*clientCert}}})
	resp, body := get(t, c, fmt.Sprintf("https://mtls.example.com:%d/", port(t, srv.URL)))
	if resp.StatusCode != 200 || body != "hello client.example" {
		t.Errorf("mTLS through the proxy: %s %q", resp.Status, body)
	}
}

// Over SOCKS5 too, what is not TLS is never given a secret: SSH to a
// secret's host is tunnelled, anything but HTTP to a host with HTTP rules
// refused.
func TestSecretHostOtherProtocolsOverSOCKS5(t *testing.T) {
	ih := newInterceptHarness(t, false)
	echoPort := tcpServer(t, echo)
	for _, tc := range []struct{ host, want string }{
		{"api.example.com", "SSH-2.0-probe\r\n"},
		{"rules.example.com", "HTTP/1.1 400 Bad Request\r\n"},
	} {
		c, code := ih.socks5(tc.host, echoPort)
		if code != 0 {
			t.Fatalf("%s: SOCKS5 reply %d", tc.host, code)
		}
		io.WriteString(c, "SSH-2.0-probe\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.host, line, err, tc.want)
		}
	}
}

// A header transform (E2B's network rules) sets its field on every
// intercepted request to its host, over whatever the sandbox sent, and
// on no other host's; its value never comes back in a response; names
// that frame or route requests are refused.
func TestSecretHeaderTransform(t *testing.T) {
	upCA, err := NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	o := newRecOrigin(t, upCA)
	ca, err := NewCA("sbx-test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "other.example.com", "127.0.0.1"},
		Secrets: []Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "X-Api-Key", Value: testSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.Policy, c.CA, c.UpstreamRoots = pol, ca, o.roots })
	for _, n := range []string{"api.example.com", "other.example.com"} {
		h.res.set(n, "127.0.0.1")
	}
	c := h.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	for _, sent := range []string{"", "from-inside"} {
		var hdr []string
		if sent != "" {
			hdr = []string{"X-Api-Key", sent}
		}
		resp, _ := get(t, c, fmt.Sprintf("https://api.example.com:%d/x", o.port), hdr...)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		if got := o.last(t); got.APIKey != testSecret {
			t.Errorf("api.example.com received X-Api-Key %q (the sandbox sent %q), want the transform's value", got.APIKey, sent)
		}
	}
	// Another host gets nothing (and is not intercepted).
	oc := h.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: o.roots}})
	if resp, _ := get(t, oc, fmt.Sprintf("https://other.example.com:%d/x", o.port)); resp.StatusCode != 200 || o.last(t).APIKey != "" {
		t.Errorf("other.example.com: %s, X-Api-Key %q", resp.Status, o.last(t).APIKey)
	}
	for _, bad := range []string{"Host", "content-length", "Transfer-Encoding", "Proxy-Authorization", "X Bad"} {
		if _, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com"},
			Secrets: []Secret{{Name: "R", Hosts: []string{"api.example.com"}, Header: bad, Value: testSecret}}}); err == nil || !strings.Contains(err.Error(), "header") {
			t.Errorf("a transform of header %q: %v, want a refusal naming the header", bad, err)
		}
	}
	if s := fmt.Sprint(pol.Secrets()[0]); strings.Contains(s, testSecret) || !strings.Contains(s, "X-Api-Key") {
		t.Errorf("printed: %q", s)
	}
}

// TestHeaderTransformPartNotEchoed: an upstream that echoes only the
// token of a header transform's "Bearer TOKEN" (as many APIs' "invalid
// key: ..." pages do) does not hand the token to the sandbox: each part
// of the value long enough to tell apart is scrubbed as the whole is;
// a short word ("Bearer") is left alone.
func TestHeaderTransformPartNotEchoed(t *testing.T) {
	const token = "ghp_partial0123456789"
	upCA, err := NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.URL.Path {
		case "/echo": // every header, as httpbin's /headers
			fmt.Fprintf(w, "%v", r.Header)
		case "/range": // the token in a page served by ranges
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader("your key "+tok+" is not valid, padding padding padding"))
		case "/trailer":
			w.Header().Set("Trailer", "X-Echo")
			fmt.Fprint(w, "body")
			w.Header().Set("X-Echo", tok)
		default:
			w.Header().Set("X-Refused", tok)
			fmt.Fprintf(w, "invalid api key: %s (Bearer is the scheme)", tok)
		}
	}))
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.leaf(h.ServerName) }}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	ca, err := NewCA("sbx-test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	const key2 = "key2_0123456789abcdef"
	pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "api2.example.com", "127.0.0.1"},
		Secrets: []Secret{
			{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization", Value: "Bearer " + token},
			{Name: "E2B_RULE_2", Hosts: []string{"api2.example.com"}, Header: "X-Api-Key", Value: key2},
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.Policy, c.CA, c.UpstreamRoots = pol, ca, roots })
	h.res.set("api.example.com", "127.0.0.1")
	h.res.set("api2.example.com", "127.0.0.1")
	c := h.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	resp, body := get(t, c, fmt.Sprintf("https://api.example.com:%d/x", port(t, srv.URL)))
	if strings.Contains(body, token) || strings.Contains(resp.Header.Get("X-Refused"), token) {
		t.Fatalf("the token reached the sandbox: header %q, body %q", resp.Header.Get("X-Refused"), body)
	}
	if !strings.HasPrefix(body, "invalid api key: ") || !strings.Contains(body, "Bearer is the scheme") {
		t.Fatalf("body %q: want the page with the token replaced and the rest as it was", body)
	}
	// What a review then tried (each leaked before the fix after it):
	// the placeholder the scrubbed echo taught the sandbox, sent back in
	// a Basic credential (the proxy re-encoded the value into it); the
	// echo fetched in 7-byte ranges; the echo in a trailer; a quoted
	// token.
	_, echo := get(t, c, fmt.Sprintf("https://api2.example.com:%d/echo", port(t, srv.URL)))
	i := strings.Index(echo, "X-Api-Key:[")
	if i < 0 || strings.Contains(echo, key2) {
		t.Fatalf("the echo of api2's headers: %q", echo)
	}
	ph := echo[i+len("X-Api-Key:["):]
	ph = ph[:strings.IndexByte(ph, ']')]
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+ph))
	_, body = get(t, c, fmt.Sprintf("https://api2.example.com:%d/echo", port(t, srv.URL)), "Authorization", basic, "X-Mine", ph)
	if strings.Contains(body, key2) || strings.Contains(body, base64.StdEncoding.EncodeToString([]byte("u:"+key2))) {
		t.Errorf("the placeholder sent back was replaced by the value: %q", body)
	}
	var joined strings.Builder
	for off := 0; off < 200; off += 7 {
		r, part := get(t, c, fmt.Sprintf("https://api.example.com:%d/range", port(t, srv.URL)), "Range", fmt.Sprintf("bytes=%d-%d", off, off+6))
		if r.StatusCode == http.StatusPartialContent {
			joined.WriteString(part)
		} else if off == 0 && strings.Contains(part, token) {
			t.Errorf("a whole answer to a range request holds the token: %q", part)
		}
	}
	if strings.Contains(joined.String(), token) {
		t.Errorf("the token reassembled from ranges: %q", joined.String())
	}
	resp, _ = get(t, c, fmt.Sprintf("https://api.example.com:%d/trailer", port(t, srv.URL)))
	if strings.Contains(fmt.Sprint(resp.Trailer), token) {
		t.Errorf("the token in a trailer: %v", resp.Trailer)
	}
	if got := credentialParts(`Token token="` + token + `"`); len(got) != 1 || got[0] != token {
		t.Errorf("credentialParts of a quoted token: %q", got)
	}
	if got := credentialParts("Bearer " + token); len(got) != 1 || got[0] != token {
		t.Errorf("credentialParts: %q", got)
	}
	if got := credentialParts("k1=" + token + "; k2=short, " + token); len(got) != 1 {
		t.Errorf("credentialParts of a list: %q", got)
	}
}
