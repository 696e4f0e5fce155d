package netpolicy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
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
