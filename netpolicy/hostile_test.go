package netpolicy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"html"
	htmltemplate "html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
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

// TestHostileOriginStatusLine: a reason phrase quoting the credential,
// in the final response and in a 1xx one, reaches the sandbox with the
// placeholder in its place.
func TestHostileOriginStatusLine(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/final":
			return "HTTP/1.1 401 Bad credentials " + auth + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		case "/early":
			return "HTTP/1.1 103 Early " + auth + "\r\nLink: </style.css>; rel=preload\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
		}
		return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	for path, want := range map[string]string{
		"/final": "HTTP/1.1 401 Bad credentials Bearer " + hostileTokenPH + "\r\n",
		"/early": "HTTP/1.1 103 Early Bearer " + hostileTokenPH + "\r\n",
	} {
		got := ih.rawExchange(t, "api.example.com", "GET "+path+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
		if a := o.last(t).Header.Get("Authorization"); a != "Bearer "+hostileToken {
			t.Fatalf("%s: the origin received %q", path, a)
		}
		assertNoValue(t, path, got)
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s: got\n%s\nwant it to start with %q", path, got, want)
		}
	}
}

// TestHostileOriginHeaderName: a header field named after the value
// (which net/http re-cases) reaches the sandbox named after the
// placeholder.
func TestHostileOriginHeaderName(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		return "HTTP/1.1 200 OK\r\nX-Echo-" + tok + ": 1\r\n" + tok + ": 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	assertNoValue(t, "header name", got)
	if !strings.Contains(strings.ToLower(got), strings.ToLower("X-Echo-"+hostileTokenPH+": 1\r\n")) {
		t.Errorf("got\n%s\nwant the field named after the placeholder", got)
	}
}

// TestHostileOriginBasicEcho: an origin echoing the Basic credential the
// proxy encoded (in a header, in a JSON body, without padding, and the
// value's base64 on its own) hands back no base64 of the value: the
// credential the proxy made comes back as the one the sandbox sent.
func TestHostileOriginBasicEcho(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		cred := strings.TrimPrefix(auth, "Basic ")
		raw, _ := base64.StdEncoding.DecodeString(cred)
		_, pass, _ := strings.Cut(string(raw), ":")
		body := fmt.Sprintf(`{"authorization":%q,"unpadded":%q,"urlsafe":%q,"password_b64":%q}`, auth,
			strings.TrimRight(cred, "="), base64.URLEncoding.EncodeToString(raw), base64.StdEncoding.EncodeToString([]byte(pass)))
		return "HTTP/1.1 200 OK\r\nX-Echo: " + auth + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := newHostileHarness(t, o)
	for _, user := range []string{"user", "x-access-token", "ab"} {
		sent := base64.StdEncoding.EncodeToString([]byte(user + ":" + hostileTokenPH))
		got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Basic "+sent+"\r\nConnection: close\r\n\r\n")
		if a := o.last(t).Header.Get("Authorization"); a != "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+hostileToken)) {
			t.Fatalf("the origin received %q", a)
		}
		assertNoValue(t, "Basic echo", got)
		if !strings.Contains(got, "X-Echo: Basic "+sent+"\r\n") || !strings.Contains(got, `"authorization":"Basic `+sent+`"`) {
			t.Errorf("user %s: got\n%s\nwant the sandbox's own credential echoed", user, got)
		}
		for _, core := range b64Cores(hostileToken) {
			if strings.Contains(got, core) {
				t.Errorf("user %s: the answer holds %q, base64 of the value", user, core)
			}
		}
	}
}

// TestHostileOriginBasicTwoSecrets: a Basic credential holding two
// secrets' placeholders (user and password) comes back, echoed, as the
// sandbox sent it: no base64 of either value, alone or together.
func TestHostileOriginBasicTwoSecrets(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		return "HTTP/1.1 200 OK\r\nX-Echo: " + auth + "\r\nContent-Length: " + strconv.Itoa(len(auth)) + "\r\nConnection: close\r\n\r\n" + auth
	})
	ih := newHostileHarness(t, o)
	sent := base64.StdEncoding.EncodeToString([]byte(hostileTokenPH + ":" + hostileKeyPH))
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Basic "+sent+"\r\nConnection: close\r\n\r\n")
	if a := o.last(t).Header.Get("Authorization"); a != "Basic "+base64.StdEncoding.EncodeToString([]byte(hostileToken+":"+hostileKey)) {
		t.Fatalf("the origin received %q", a)
	}
	assertNoValue(t, "two secrets in Basic", got)
	for _, v := range []string{hostileToken, hostileKey, hostileToken + ":" + hostileKey, hostileToken + ":" + hostileKeyPH, hostileTokenPH + ":" + hostileKey} {
		for _, core := range b64Cores(v) {
			if strings.Contains(got, core) {
				t.Errorf("the answer holds %q, base64 of %q", core, v)
			}
		}
	}
	if !strings.Contains(got, "X-Echo: Basic "+sent+"\r\n") || strings.Count(got, "Basic "+sent) != 2 {
		t.Errorf("got\n%s\nwant the sandbox's own credential echoed", got)
	}
}

// TestHostileOriginTransformBasic: a header transform whose value is a
// Basic credential: an origin echoing it decoded, or its password alone,
// hands over neither.
func TestHostileOriginTransformBasic(t *testing.T) {
	const password = "tr4nsform-PASSWORD-value"
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.Header.Get("Authorization"), "Basic "))
		_, pass, _ := strings.Cut(string(raw), ":")
		body := "you are " + string(raw) + "; password " + pass + "; b64 " + base64.StdEncoding.EncodeToString([]byte(pass))
		return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := &interceptHarness{}
	var err error
	if ih.ca, err = NewCA("sbx-hostile"); err != nil {
		t.Fatal(err)
	}
	ih.pool = x509.NewCertPool()
	ih.pool.AddCert(ih.ca.Certificate())
	pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "127.0.0.1"},
		Secrets: []Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization",
			Value: "Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+password))}}})
	if err != nil {
		t.Fatal(err)
	}
	ih.harness = newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.Policy, c.CA, c.UpstreamRoots = pol, ih.ca, o.roots })
	ih.res.set("api.example.com", "127.0.0.1")
	ih.o = &recOrigin{port: o.port}
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if !strings.Contains(o.last(t).Header.Get("Authorization"), "Basic ") {
		t.Fatalf("the origin received %q", o.last(t).Header.Get("Authorization"))
	}
	if strings.Contains(got, password) || strings.Contains(got, "svc:"+password) {
		t.Errorf("the sandbox received the password:\n%s", got)
	}
	for _, core := range b64Cores(password) {
		if strings.Contains(got, core) {
			t.Errorf("the answer holds %q, base64 of the password:\n%s", core, got)
		}
	}
	if !strings.Contains(got, "you are ") {
		t.Errorf("got\n%s", got)
	}
}

// TestHostileOriginURLEcho: KEY (in_url) placed in a path and a query is
// escaped as one segment ('/' too), and an origin echoing the request
// target, encoded or decoded, hands back no form of it; the network log's
// path has the placeholder.
func TestHostileOriginURLEcho(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		body := "target " + r.RequestURI + "\npath " + r.URL.Path + "\nquery " + r.URL.Query().Get("k") + "\n" +
			"lower-case escapes " + lowerEscapes(r.RequestURI) + "\n"
		return "HTTP/1.1 200 OK\r\nX-Target: " + r.RequestURI + "\r\nLocation: https://api.example.com" + r.RequestURI + "\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "GET /v1/"+hostileKeyPH+"/x?k="+hostileKeyPH+" HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	esc := "pk%2FS3CR3T%2Fpath%3Dvalue%2Bmore"
	req := o.last(t)
	if req.RequestURI != "/v1/"+esc+"/x?k="+esc {
		t.Errorf("the origin received %q, want the value escaped as one segment", req.RequestURI)
	}
	if segs := strings.Split(req.URL.EscapedPath(), "/"); len(segs) != 4 || req.URL.Query().Get("k") != hostileKey {
		t.Errorf("the origin read the path as %q (segments %q), the query as %q", req.URL.EscapedPath(), segs, req.URL.Query().Get("k"))
	}
	assertNoValue(t, "URL echo", got)
	if !strings.Contains(got, "X-Target: /v1/"+hostileKeyPH+"/x?k="+hostileKeyPH+"\r\n") {
		t.Errorf("got\n%s\nwant the sandbox's own target echoed", got)
	}
	ih.proxy.Close()
	found := false
	for _, r := range ih.audit.records(t) {
		if r.Event == EventRequest && r.Host == "api.example.com" {
			found = true
			if r.Path != "/v1/"+hostileKeyPH+"/x" {
				t.Errorf("the network log's path is %q, want the placeholder's", r.Path)
			}
		}
	}
	if !found {
		t.Error("no request record")
	}
	assertNoValue(t, "network log", ih.auditText())
}

// TestHostileOriginMalformedHead: a response head net/http cannot read
// (a line without a colon, a field name with a '/', a Content-Length or
// encoding quoting the value) is tent's 502, which quotes none of it.
func TestHostileOriginMalformedHead(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/nocolon":
			return "HTTP/1.1 200 OK\r\nX-Ok: 1\r\nBad line " + auth + "\r\n\r\n"
		case "/badname":
			return "HTTP/1.1 200 OK\r\nX/" + auth + ": 1\r\n\r\n"
		case "/length":
			return "HTTP/1.1 200 OK\r\nContent-Length: " + auth + "\r\n\r\n"
		case "/encoding":
			return "HTTP/1.1 200 OK\r\nContent-Encoding: " + auth + "\r\nContent-Length: 2\r\n\r\nok"
		case "/status":
			return "HTTP/1.1 2" + auth + " OK\r\n\r\n"
		case "/version":
			return auth + " 200 OK\r\n\r\n"
		}
		return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	key := "api.example.com:" + strconv.Itoa(o.port)
	for path, want := range map[string]string{
		"/nocolon":  "tent: " + key + ": " + errMalformedResponse.Error() + "\n",
		"/badname":  "tent: " + key + ": " + errMalformedResponse.Error() + "\n",
		"/length":   "tent: " + key + ": " + errMalformedResponse.Error() + "\n",
		"/status":   "tent: " + key + ": " + errMalformedResponse.Error() + "\n",
		"/version":  "tent: " + key + ": " + errMalformedResponse.Error() + "\n",
		"/encoding": "tent: " + key + ": a response from a secret's host is encoded in a way tent cannot check for the secret's value (it reads gzip and identity)\n",
	} {
		got := ih.rawExchange(t, "api.example.com", "GET "+path+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
		assertNoValue(t, path, got)
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, got)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadGateway || string(body) != want {
			t.Errorf("%s: %s %q, want 502 %q", path, resp.Status, body, want)
		}
	}
	ih.proxy.Close()
	assertNoValue(t, "network log", ih.auditText())
}

// TestHostileOriginTrailer: a trailer quoting the value is not relayed.
func TestHostileOriginTrailer(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		return "HTTP/1.1 200 OK\r\nTrailer: X-Echo\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
			"2\r\nok\r\n0\r\nX-Echo: " + auth + "\r\n" + auth + ": 1\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	assertNoValue(t, "trailer", got)
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.Contains(got, "\r\n2\r\nok\r\n0\r\n") {
		t.Errorf("got\n%s", got)
	}
}

// TestHostileOriginPlainHTTP: a bound host answering plain http:// (no
// secret goes there) with a value it kept from an HTTPS request is
// scrubbed all the same.
func TestHostileOriginPlainHTTP(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		o.mu.Lock()
		kept := o.lastAuth
		o.mu.Unlock()
		body := "you last sent " + kept
		return "HTTP/1.1 200 OK " + kept + "\r\nX-Kept: " + kept + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := newHostileHarness(t, o)
	ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	b := ih.plainExchange(t, fmt.Sprintf("GET http://api.example.com:%d/ HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: close\r\n\r\n", o.plainPort, o.plainPort))
	assertNoValue(t, "plain http", string(b))
	if !strings.Contains(string(b), "you last sent Bearer "+hostileTokenPH) {
		t.Errorf("got\n%s", b)
	}
	// The same over SOCKS5 (as a program ignoring the proxy variables is
	// caught): clear-text HTTP to a secret's host is read, not tunnelled.
	sc, code := ih.socks5("api.example.com", o.plainPort)
	if code != 0 {
		t.Fatalf("SOCKS5 reply %d", code)
	}
	defer sc.Close()
	sc.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(sc, "GET / HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: close\r\n\r\n", o.plainPort)
	bs, _ := io.ReadAll(sc)
	b = string(bs)
	assertNoValue(t, "plain http over SOCKS5", b)
	if !strings.Contains(b, "you last sent Bearer "+hostileTokenPH) {
		t.Errorf("over SOCKS5: got\n%s", b)
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

// TestScrubReaderEveryFormSplit: each form of a value the scrubber
// knows (and a Basic credential the proxy made) is replaced by the same
// form of the placeholder however the body is cut into reads.
func TestScrubReaderEveryFormSplit(t *testing.T) {
	made := []byte("user:" + hostileKey)
	sent := []byte("user:" + hostileKeyPH)
	pairs := sortPairs(append(secretForms(hostileKey, hostileKeyPH), basicForms(made, sent)...))
	if len(pairs) < 8 {
		t.Fatalf("only %d forms", len(pairs))
	}
	var in, want strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&in, "<%s>", p.value)
		fmt.Fprintf(&want, "<%s>", p.placeholder)
	}
	if got := scrubString(in.String(), pairs); got != want.String() {
		t.Fatalf("scrubString:\n%s\nwant\n%s", got, want.String())
	}
	for size := 1; size <= 64; size++ {
		r := &scrubReader{r: &chunkReader{s: in.String(), n: size}, pairs: pairs}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want.String() {
			t.Fatalf("reads of %d: %v\n%s\nwant\n%s", size, err, got, want.String())
		}
	}
}

// FuzzScrubReader: however a body is cut into reads, the scrubber
// streams out what it makes of the whole body at once, and no value is
// left in it that was not made of placeholders.
func FuzzScrubReader(f *testing.F) {
	f.Add("..SECRET..SECRETSECRET.AB.SECRE", "SECRET", "AB", uint8(3))
	f.Add("xxABCABCDyy", "ABCD", "ABC", uint8(1))
	f.Fuzz(func(t *testing.T, in, v1, v2 string, size uint8) {
		// Values hold no CR, LF or NUL (Compile refuses them), which the
		// scrubber relies on.
		if v1 == "" || v2 == "" || len(v1) > 64 || len(v2) > 64 || size == 0 || strings.ContainsAny(v1+v2, "\r\n\x00") {
			return
		}
		pairs := sortPairs([]scrubPair{{[]byte(v1), []byte("<1>")}, {[]byte(v2), []byte("<2>")}})
		want := scrubString(in, pairs)
		got, err := io.ReadAll(&scrubReader{r: &chunkReader{s: in, n: int(size)}, pairs: pairs})
		if err != nil || string(got) != want {
			t.Fatalf("reads of %d: %q %v, want %q", size, got, err, want)
		}
		if !strings.ContainsAny(v1+v2, "<>12") && (strings.Contains(want, v1) || strings.Contains(want, v2)) {
			t.Fatalf("%q holds a value", want)
		}
	})
}

// TestScrubReaderStreams: a streamed body of lines (server-sent events,
// JSON lines) is not held up: what ends in a line end is returned at
// once, without waiting for the next read (no value holds a line end);
// the last bytes after it are held, whatever they are (see
// TestScrubReaderNoPrefixOracle), and a value split across reads is
// still found.
func TestScrubReaderStreams(t *testing.T) {
	pairs := sortPairs(secretForms(hostileKey, hostileKeyPH))
	long := strings.Repeat("x", 200)
	for _, tc := range []struct{ event, first string }{
		{"data: {\"token\": \"hello\"}\n\n", "data: {\"token\": \"hello\"}\n\n"},
		{"data: pk/S3\n\n", "data: pk/S3\n\n"},
		{"data: pk%2FS3\r\n", "data: pk%2FS3\r\n"},
		{"data: 1\n\ndata: pk/S3", "data: 1\n\n"},
		{"data: 1\n\ndata: hello", "data: 1\n\n"},
		{long + "pk/S3", long[:len(long)+5-(longestValue(pairs)-1)]},
	} {
		src := &onceReader{s: tc.event}
		r := &scrubReader{r: src, pairs: pairs}
		b := make([]byte, 1024)
		n, err := r.Read(b)
		if err != nil || string(b[:n]) != tc.first || src.calls != 1 {
			t.Errorf("%q: first Read %q %v after %d reads, want %q after 1", tc.event, b[:n], err, src.calls, tc.first)
		}
	}
}

// onceReader returns s on its first Read, then io.EOF.
type onceReader struct {
	s     string
	calls int
}

func (o *onceReader) Read(b []byte) (int, error) {
	o.calls++
	if o.calls > 1 {
		return 0, io.EOF
	}
	return copy(b, o.s), nil
}

// TestHostileOriginRotatedValue: after a header transform's value is
// rotated (SetPolicy), its host echoing the old value it kept hands it
// over no more than the new one.
func TestHostileOriginRotatedValue(t *testing.T) {
	const oldValue, newValue = "old-VALUE-0123456789abcdef", "new-VALUE-fedcba9876543210"
	var mu sync.Mutex
	var seen []string
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("X-Api-Key"))
		body := "keys " + strings.Join(seen, ",")
		return "HTTP/1.1 200 OK " + body + "\r\nX-Keys: " + body + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ca, err := NewCA("sbx-hostile")
	if err != nil {
		t.Fatal(err)
	}
	ih := &interceptHarness{ca: ca, pool: x509.NewCertPool(), o: &recOrigin{port: o.port}}
	ih.pool.AddCert(ca.Certificate())
	compile := func(v string) *Compiled {
		pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "127.0.0.1"},
			Secrets: []Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "X-Api-Key", Value: v}}})
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	ih.harness = newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.Policy, c.CA, c.UpstreamRoots = compile(oldValue), ca, o.roots })
	ih.res.set("api.example.com", "127.0.0.1")
	req := "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n"
	ih.rawExchange(t, "api.example.com", req)
	ih.proxy.SetPolicy(compile(newValue))
	got := ih.rawExchange(t, "api.example.com", req)
	mu.Lock()
	got2 := slices.Clone(seen)
	mu.Unlock()
	if len(got2) != 2 || got2[0] != oldValue || got2[1] != newValue {
		t.Fatalf("the origin received %q", got2)
	}
	for _, v := range []string{oldValue, newValue} {
		if strings.Contains(got, v) {
			t.Errorf("the sandbox received %q:\n%s", v, got)
		}
	}
	ih.proxy.SetPolicy(compile(oldValue)) // back: the old value is current again, the new one retired
	got = ih.rawExchange(t, "api.example.com", req)
	for _, v := range []string{oldValue, newValue} {
		if strings.Contains(got, v) {
			t.Errorf("after rotating back, the sandbox received %q:\n%s", v, got)
		}
	}
}

// TestNetLogPathCutKeepsNoValue: the network log keeps the path the
// sandbox sent, cut to 512 bytes: cut where the value was put in, the
// path would hold a piece of it, which no scrubbing of the record finds.
func TestNetLogPathCutKeepsNoValue(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	pad := "/" + strings.Repeat("a", 490)
	ih.rawExchange(t, "api.example.com", "GET "+pad+"/"+hostileKeyPH+"/x HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if !strings.Contains(o.last(t).RequestURI, pathEscape(hostileKey)) {
		t.Fatalf("the origin received %q", o.last(t).RequestURI)
	}
	ih.proxy.Close()
	esc := pathEscape(hostileKey)
	for _, r := range ih.audit.records(t) {
		if r.Event != EventRequest {
			continue
		}
		if want := clampText(pad+"/"+hostileKeyPH+"/x", 512); r.Path != want {
			t.Errorf("path %q, want %q", r.Path, want)
		}
		for n := 8; n <= len(esc); n++ {
			if strings.Contains(r.Path, esc[:n]) {
				t.Fatalf("the log's path holds %q, the start of the value", esc[:n])
			}
		}
	}
}

// TestRecordScrubbed: whatever a record is given, the audit log holds no
// value of the policy's secrets, current or retired (the last net under
// the callers, which record what the sandbox sent).
func TestRecordScrubbed(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string { return "" })
	ih := newHostileHarness(t, o)
	ih.proxy.record(AuditRecord{Event: EventDecision, Reason: "quoted " + hostileToken + " " + base64.StdEncoding.EncodeToString([]byte("u:"+hostileKey)), Path: "/" + pathEscape(hostileKey)})
	ih.proxy.Close()
	assertNoValue(t, "record", ih.auditText())
	if !strings.Contains(ih.auditText(), `"reason":"quoted `+hostileTokenPH+" ") {
		t.Errorf("log: %s", ih.auditText())
	}
}

// TestSecretFormsQuoted: a value with '/', '"' and non-ASCII letters,
// quoted by the JSON encoders APIs use (Go's, PHP's escaping '/',
// Python's escaping non-ASCII) or by Go's %q, is found in each.
func TestSecretFormsQuoted(t *testing.T) {
	const v, ph = `q/"value"-é-😀-<x>`, "tent_33333333333333333333333333333333_ph"
	pairs := sortPairs(secretForms(v, ph))
	for _, quoted := range []string{
		`{"k":"q/\"value\"-é-😀-\u003cx\u003e"}`,        // Go
		`{"k":"q\/\"value\"-é-😀-<x>"}`,                 // PHP
		`{"k": "q/\"value\"-\u00e9-\ud83d\ude00-<x>"}`, // Python
		`{"k":"q\/\"value\"-\u00e9-\ud83d\ude00-<x>"}`, // PHP's default (non-ASCII escaped too)
		fmt.Sprintf("%q", v),
	} {
		if got := scrubString(quoted, pairs); strings.Contains(got, "value") {
			t.Errorf("%s: scrubbed to %s", quoted, got)
		}
	}
}

// TestHostileOriginRemovedTransform: after a header transform is removed
// (E2B's updateNetwork without it) or moved to another host, the host
// that received its value is still intercepted and its answers
// scrubbed: tunnelled end to end, an answer quoting the value it kept
// would reach the sandbox as it is (the sandbox need not trust the
// proxy's CA to read a tunnel).
func TestHostileOriginRemovedTransform(t *testing.T) {
	const value = "kept-VALUE-0123456789abcdef"
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		o.mu.Lock()
		defer o.mu.Unlock()
		body := "you sent "
		for _, g := range o.got {
			body += g.Header.Get("X-Api-Key") + ","
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ca, err := NewCA("sbx-hostile")
	if err != nil {
		t.Fatal(err)
	}
	compile := func(hosts ...string) *Compiled {
		var secrets []Secret
		if len(hosts) > 0 {
			secrets = []Secret{{Name: "E2B_RULE_1", Hosts: hosts, Header: "X-Api-Key", Value: value}}
		}
		pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "other.example.com", "127.0.0.1"}, Secrets: secrets})
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	for name, after := range map[string]*Compiled{
		"removed": compile(),
		"moved":   compile("other.example.com"),
	} {
		t.Run(name, func(t *testing.T) {
			ih := &interceptHarness{ca: ca, pool: x509.NewCertPool(), o: &recOrigin{port: o.port}}
			ih.pool.AddCert(ca.Certificate())
			ih.harness = newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.Policy, c.CA, c.UpstreamRoots = compile("api.example.com"), ca, o.roots })
			ih.res.set("api.example.com", "127.0.0.1")
			ih.res.set("other.example.com", "127.0.0.1")
			req := "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n"
			ih.rawExchange(t, "api.example.com", req)
			if k := o.last(t).Header.Get("X-Api-Key"); k != value {
				t.Fatalf("the origin received %q", k)
			}
			ih.proxy.SetPolicy(after)
			// A hostile sandbox reads whatever certificate it is given.
			tc, err := ih.dialTLS("api.example.com", &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			tc.SetDeadline(time.Now().Add(30 * time.Second))
			io.WriteString(tc, req)
			b, _ := io.ReadAll(tc)
			if strings.Contains(string(b), value) {
				t.Errorf("the sandbox received the removed value:\n%s", b)
			}
			if !strings.Contains(string(b), "you sent ") {
				t.Errorf("got\n%s", b)
			}
			if k := o.last(t).Header.Get("X-Api-Key"); k != "" {
				t.Errorf("after the change the origin received %q", k)
			}
		})
	}
}

// TestHostileOriginContentEncodingFields: the body's encodings are
// those of every Content-Encoding field, not the first one's: a gzip
// body announced by a second field (after "identity"), or gzip over
// gzip, would reach the sandbox compressed, unscrubbed, for its client to
// decode. One gzip layer, however written, is decoded and scrubbed; more
// than one is tent's 502.
func TestHostileOriginContentEncodingFields(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.String()
	}
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		body := gz("you sent " + r.Header.Get("Authorization"))
		var fields string
		switch r.URL.Path {
		case "/identity-then-gzip":
			fields = "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n"
		case "/empty-then-gzip":
			fields = "Content-Encoding: \r\nContent-Encoding: gzip\r\n"
		case "/gzip-twice":
			fields = "Content-Encoding: gzip\r\nContent-Encoding: gzip\r\n"
			body = gz(body)
		case "/gzip-gzip":
			fields = "Content-Encoding: gzip, gzip\r\n"
			body = gz(body)
		case "/upper":
			fields = "Content-Encoding: GZip\r\n"
		case "/identity-gzip":
			fields = "Content-Encoding: identity, gzip\r\n"
		}
		return "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := newHostileHarness(t, o)
	key := "api.example.com:" + strconv.Itoa(o.port)
	refused := "tent: " + key + ": " + errUnreadableEncoding.Error() + "\n"
	for path, want := range map[string]string{
		"/identity-then-gzip": "you sent Bearer " + hostileTokenPH,
		"/empty-then-gzip":    "you sent Bearer " + hostileTokenPH,
		"/gzip-twice":         refused,
		"/gzip-gzip":          refused,
		"/upper":              "you sent Bearer " + hostileTokenPH,
		"/identity-gzip":      "you sent Bearer " + hostileTokenPH,
	} {
		got := ih.rawExchange(t, "api.example.com", "GET "+path+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("%s: %v\n%q", path, err, got)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != want || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: %s %q %q, want %q", path, resp.Status, resp.Header.Values("Content-Encoding"), body, want)
		}
	}
}

// TestScrubReaderNoPrefixOracle: what the scrubber returns before it
// reads more does not depend on the value. A sandbox that makes a
// secret's host stream its own text back (a full-duplex echo: Node's
// req.pipe(res)) and sends "guess" + one byte at a time would otherwise
// learn, from which echoes come back before it sends more, which bytes
// start a form of the value: the whole value, a byte per 256 tries.
func TestScrubReaderNoPrefixOracle(t *testing.T) {
	// Two values whose forms have the same lengths.
	const v1, v2 = "Abcdefgh0123456789-secret-ONE", "Zyxwvuts9876543210-secret-TWO"
	const ph = "tent_44444444444444444444444444444444_ph"
	first := func(v, in string) (string, int) {
		src := &onceReader{s: in}
		b := make([]byte, 4096)
		n, err := (&scrubReader{r: src, pairs: sortPairs(secretForms(v, ph))}).Read(b)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return string(b[:n]), src.calls
	}
	pad := strings.Repeat("x", 100)
	for _, v := range []string{v1, v2} {
		for _, f := range secretForms(v, ph) {
			for _, k := range []int{1, 5, len(f.value) - 1} {
				for _, in := range []string{"guess " + string(f.value[:k]), pad + string(f.value[:k]), "line\n" + string(f.value[:k])} {
					got1, calls1 := first(v1, in)
					got2, calls2 := first(v2, in)
					if got1 != got2 || calls1 != calls2 {
						t.Fatalf("%q: before reading more, with one value the scrubber returned %q (after %d reads), with the other %q (after %d)",
							in, got1, calls1, got2, calls2)
					}
				}
			}
		}
	}
}

// TestHostileOriginCaughtHTTPMethods: clear-text HTTP to a secret's host
// over SOCKS5 (or caught) is read and its answer scrubbed whatever the
// method: one the proxy did not list (PROPFIND, a lower-case get), which
// an origin that ignores the method answers as any other, was tunnelled
// unread, its answer quoting a value the host kept relayed as it was.
func TestHostileOriginCaughtHTTPMethods(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		o.mu.Lock()
		kept := o.lastAuth
		o.mu.Unlock()
		body := r.Method + " you last sent " + kept
		return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	})
	ih := newHostileHarness(t, o)
	ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	for _, method := range []string{"PROPFIND", "get", "M-SEARCH", "GET"} {
		sc, code := ih.socks5("api.example.com", o.plainPort)
		if code != 0 {
			t.Fatalf("SOCKS5 reply %d", code)
		}
		sc.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(sc, "%s / HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: close\r\n\r\n", method, o.plainPort)
		b, _ := io.ReadAll(sc)
		sc.Close()
		assertNoValue(t, method, string(b))
		if !strings.Contains(string(b), method+" you last sent Bearer "+hostileTokenPH) {
			t.Errorf("%s: got\n%s", method, b)
		}
	}
}

// TestHostileOriginCaughtHTTPStall: a program that stops inside its
// request line ("GE") until the head timeout has passed does not get
// the rest of its request tunnelled unread (the proxy, not knowing yet
// whether it spoke HTTP, tunnelled what it had): the connection is
// reset, and the origin gets nothing.
func TestHostileOriginCaughtHTTPStall(t *testing.T) {
	// An origin in clear text that answers whatever it reads (once a
	// head's end arrives) with the value it kept, and tells when bytes
	// first arrive.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	var wg sync.WaitGroup
	defer func() { l.Close(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				var all []byte
				b := make([]byte, 4096)
				for !bytes.Contains(all, []byte("\r\n\r\n")) {
					n, err := c.Read(b)
					if n > 0 && len(all) == 0 {
						select {
						case got <- string(b[:n]):
						default:
						}
					}
					all = append(all, b[:n]...)
					if err != nil {
						return
					}
				}
				body := "kept " + hostileToken
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
			}()
		}
	}()
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string { return "" })
	ih := newHostileHarness(t, o, func(c *ProxyConfig) { c.HeadTimeout = time.Second })
	sc, code := ih.socks5("api.example.com", l.Addr().(*net.TCPAddr).Port)
	if code != 0 {
		t.Fatalf("SOCKS5 reply %d", code)
	}
	defer sc.Close()
	sc.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(sc, "GE")
	closed := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(sc); closed <- b }()
	select {
	case first := <-got: // tunnelled: the rest goes unread too
		io.WriteString(sc, "T / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
		t.Errorf("the origin received %q of a stalled request line, and answered the sandbox %q", first, <-closed)
	case b := <-closed:
		if len(b) != 0 {
			t.Errorf("the sandbox received %q", b)
		}
	}
}

// TestRequestLineStart: what a caught connection to a secret's host
// must send first to be read as HTTP (any method) or tunnelled (another
// protocol), and when the proxy cannot tell yet.
func TestRequestLineStart(t *testing.T) {
	for in, want := range map[string][2]bool{
		"GET / HTTP/1.1\r\n":       {true, true},
		"PROPFIND /x HTTP/1.1\r\n": {true, true},
		"get /x HTTP/":             {true, true},
		"GET /x\r\n":               {true, true}, // HTTP/0.9
		"SSH-2.0-OpenSSH_9.6\r\n":  {false, true},
		"SET k v\r\n":              {false, true},
		"NICK nick\r\n":            {false, true},
		"CAP LS 302\r\n":           {false, true},
		"\x16\x03\x01":             {false, true},
		"GET  /":                   {false, true},
		"GE":                       {false, false},
		"GET /x":                   {false, false},
		"GET /x HT":                {false, false},
	} {
		if isHTTP, decided := requestLineStart([]byte(in)); isHTTP != want[0] || decided != want[1] {
			t.Errorf("%q: HTTP %v, decided %v; want %v, %v", in, isHTTP, decided, want[0], want[1])
		}
	}
}

// TestHostileOriginStatusBelow100: a status code under 100 ("099"),
// which net/http reads, with a body, is not relayed as an interim
// response (whose head alone was scrubbed, its body written as it came):
// it is tent's 502, quoting nothing.
func TestHostileOriginStatusBelow100(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		return "HTTP/1.1 099 Odd\r\nContent-Length: " + strconv.Itoa(len(auth)) + "\r\n\r\n" + auth +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	assertNoValue(t, "status 099", got)
	want := "tent: api.example.com:" + strconv.Itoa(o.port) + ": " + errMalformedResponse.Error() + "\n"
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("%v: %q", err, got)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || string(body) != want {
		t.Errorf("%s %q, want 502 %q", resp.Status, body, want)
	}
}

// TestHostileOriginKeepAliveDesync: on a kept-alive upstream connection,
// bytes an origin sends past a response's end (a body after a HEAD
// answer, a 204's or a 304's, more than its Content-Length) are read as
// the next response, and scrubbed as every response is: the sandbox's
// next request on its connection gets no value.
func TestHostileOriginKeepAliveDesync(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		forged := "HTTP/1.1 200 OK " + auth + "\r\nX-" + strings.TrimPrefix(auth, "Bearer ") + ": " + auth + "\r\nContent-Length: " + strconv.Itoa(len(auth)) + "\r\n\r\n" + auth
		switch r.URL.Path {
		case "/head":
			return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(forged)) + "\r\n\r\n" + forged
		case "/204":
			return "HTTP/1.1 204 No Content\r\nContent-Length: " + strconv.Itoa(len(forged)) + "\r\n\r\n" + forged
		case "/304":
			return "HTTP/1.1 304 Not Modified\r\n\r\n" + forged
		case "/long":
			return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + forged
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nlast"
	})
	ih := newHostileHarness(t, o)
	for _, tc := range []struct{ method, path string }{{"HEAD", "/head"}, {"GET", "/204"}, {"GET", "/304"}, {"GET", "/long"}} {
		tc2, err := ih.dialTLS("api.example.com", nil)
		if err != nil {
			t.Fatal(err)
		}
		tc2.SetDeadline(time.Now().Add(30 * time.Second))
		auth := "Authorization: Bearer " + hostileTokenPH + "\r\n"
		fmt.Fprintf(tc2, "%s %s HTTP/1.1\r\nHost: api.example.com\r\n%s\r\n", tc.method, tc.path, auth)
		br := bufio.NewReader(tc2)
		r1, err := http.ReadResponse(br, &http.Request{Method: tc.method})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		io.Copy(io.Discard, r1.Body)
		fmt.Fprintf(tc2, "GET /next HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
		rest, _ := io.ReadAll(br)
		tc2.Close()
		assertNoValue(t, tc.path, string(rest))
		if !strings.Contains(string(rest), "HTTP/1.1 200 OK Bearer "+hostileTokenPH+"\r\n") {
			t.Errorf("%s: the next answer, want the forged one, scrubbed:\n%s", tc.path, rest)
		}
	}
}

// TestHostileOriginInterimAndUpgrade: an interim response's header
// fields (names and values) are scrubbed as a final one's, and a 101
// Switching Protocols quoting the value, on an intercepted connection or
// through plain forwarding, is tent's fixed 502.
func TestHostileOriginInterimAndUpgrade(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		o.mu.Lock()
		auth := o.lastAuth
		o.mu.Unlock()
		tok := strings.TrimPrefix(auth, "Bearer ")
		switch r.URL.Path {
		case "/interim":
			return "HTTP/1.1 100 Continue\r\nX-" + tok + ": " + auth + "\r\n\r\n" +
				"HTTP/1.1 103 Early Hints\r\nLink: <https://x/" + tok + ">\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
		case "/upgrade":
			return "HTTP/1.1 101 Switching " + auth + "\r\nUpgrade: " + tok + "\r\nConnection: upgrade\r\n\r\n" + auth
		}
		return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	head := func(path string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " + hostileTokenPH + "\r\nConnection: close\r\n\r\n"
	}
	got := ih.rawExchange(t, "api.example.com", head("/interim"))
	assertNoValue(t, "interim", got)
	for _, want := range []string{
		"HTTP/1.1 100 Continue\r\nX-" + hostileTokenPH + ": Bearer " + hostileTokenPH + "\r\n",
		"Link: <https://x/" + hostileTokenPH + ">\r\n",
		"HTTP/1.1 200 OK\r\n",
		"\r\n2\r\nok\r\n0\r\n",
	} {
		if !strings.Contains(strings.ToLower(got), strings.ToLower(want)) {
			t.Errorf("interim: want %q in\n%s", want, got)
		}
	}
	key := "api.example.com:" + strconv.Itoa(o.port)
	got = ih.rawExchange(t, "api.example.com", head("/upgrade"))
	assertNoValue(t, "101", got)
	want := "tent: " + key + ": protocol upgrades are not supported over plain forwarding: use CONNECT\n"
	if !strings.HasPrefix(got, "HTTP/1.1 502 Bad Gateway\r\n") || !strings.HasSuffix(got, "\r\n\r\n"+want) {
		t.Errorf("101: got\n%s\nwant a 502 %q", got, want)
	}
	// The same through plain forwarding.
	b := ih.plainExchange(t, fmt.Sprintf("GET http://api.example.com:%d/upgrade HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: close\r\n\r\n", o.plainPort, o.plainPort))
	assertNoValue(t, "101 plain", string(b))
	want = "tent: api.example.com:" + strconv.Itoa(o.plainPort) + ": protocol upgrades are not supported over plain forwarding: use CONNECT\n"
	if !strings.HasPrefix(string(b), "HTTP/1.1 502 Bad Gateway\r\n") || !strings.HasSuffix(string(b), "\r\n\r\n"+want) {
		t.Errorf("101 plain: got\n%s\nwant a 502 %q", b, want)
	}
}

// TestHostileOriginDebugLog: tent's own log at debug level (a line per
// audit record) holds no form of a value either: not the path a value
// was put into, not a certificate's names quoting one.
func TestHostileOriginDebugLog(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	})
	var logged syncBuffer
	ih := newHostileHarness(t, o, func(c *ProxyConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ih.rawExchange(t, "api.example.com", "GET /v1/"+hostileKeyPH+"/x?k="+hostileKeyPH+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	ih.proxy.record(AuditRecord{Event: EventDecision, Reason: "failed to verify TLS: certificate is valid for " + hostileToken + ".example.com, not api.example.com", Path: "/" + pathEscape(hostileKey)})
	ih.proxy.Close()
	logged.mu.Lock()
	text := logged.b.String()
	logged.mu.Unlock()
	assertNoValue(t, "tent's debug log", text)
	if !strings.Contains(text, "valid for "+hostileTokenPH+".example.com") || !strings.Contains(text, "level=DEBUG") {
		t.Errorf("log:\n%s", text)
	}
}

// TestHostileOriginHTMLEcho: an error page quoting the credential it
// refused escapes it as HTML: Go's html/template writes the '+' of the
// value as "&#43;", which no other form matches. It reaches the sandbox
// with the placeholder in its place.
func TestHostileOriginHTMLEcho(t *testing.T) {
	page := htmltemplate.Must(htmltemplate.New("").Parse(`<p>Bad credentials: {{.}}</p>`))
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		var b strings.Builder
		page.Execute(&b, r.Header.Get("Authorization"))
		return "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/html\r\nContent-Length: " + strconv.Itoa(b.Len()) + "\r\nConnection: close\r\n\r\n" + b.String()
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
	if strings.Contains(html.UnescapeString(got), hostileToken) {
		t.Errorf("the sandbox received the value, HTML-escaped:\n%s", got)
	}
	if !strings.Contains(got, "<p>Bad credentials: Bearer "+hostileTokenPH+"</p>") {
		t.Errorf("got\n%s", got)
	}
}

// TestSecretFormsHTML: a value with every character HTML escapes, as
// the escapers of common web frameworks write it, is found in each.
func TestSecretFormsHTML(t *testing.T) {
	const v, ph = `q+"v'a&l<u>e"-secret`, "tent_55555555555555555555555555555555_ph"
	pairs := sortPairs(secretForms(v, ph))
	var goTemplate strings.Builder
	htmltemplate.Must(htmltemplate.New("").Parse(`{{.}}`)).Execute(&goTemplate, v)
	for _, escaped := range []string{
		goTemplate.String(),                             // Go html/template
		html.EscapeString(v),                            // Go html, text/template, Jinja2
		`q+&quot;v&#x27;a&amp;l&lt;u&gt;e&quot;-secret`, // Python html.escape, Django
		`q+&quot;v&#039;a&amp;l&lt;u&gt;e&quot;-secret`, // PHP htmlspecialchars
		`q+&quot;v&#39;a&amp;l&lt;u&gt;e&quot;-secret`,  // Ruby, Rails, Spring, escape-html
		`q+&quot;v&apos;a&amp;l&lt;u&gt;e&quot;-secret`, // XML
		`q+"v'a&amp;l&lt;u&gt;e"-secret`,                // text only
	} {
		if got := scrubString("<p>"+escaped+"</p>", pairs); got != "<p>"+ph+"</p>" {
			t.Errorf("%s: scrubbed to %s", escaped, got)
		}
	}
}

// TestHostileOriginGzipEdges: a gzip body whose value is split across
// two gzip members and across chunks is decoded whole and scrubbed; one
// whose checksum is wrong (after the value) is cut short, what came
// before it scrubbed.
func TestHostileOriginGzipEdges(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.Bytes()
	}
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		text := "you sent " + r.Header.Get("Authorization") + " bye"
		var body []byte
		switch r.URL.Path {
		case "/members":
			half := len(text) / 2
			body = append(gz(text[:half]), gz(text[half:])...)
		case "/crc":
			body = gz(text)
			body[len(body)-6] ^= 0xff // the CRC-32, before the length
		}
		// Chunks of 7 bytes: the members' boundary and the value's bytes
		// fall inside them.
		var chunks strings.Builder
		for len(body) > 0 {
			n := min(7, len(body))
			fmt.Fprintf(&chunks, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		return "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks.String() + "0\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	for path, want := range map[string]string{
		"/members": "you sent Bearer " + hostileTokenPH + " bye",
		"/crc":     "you sent Bearer " + hostileTokenPH + " bye",
	} {
		got := ih.rawExchange(t, "api.example.com", "GET "+path+" HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nConnection: close\r\n\r\n")
		assertNoValue(t, path, got)
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		if string(body) != want {
			t.Errorf("%s: body %q, want %q", path, body, want)
		}
		if path == "/crc" && err == nil {
			t.Errorf("%s: a complete body, want it cut short", path)
		}
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

// TestHostileOriginExpectContinue: a request with Expect: 100-continue
// gets tent's own "100 Continue" (the origin gets no Expect), and the
// origin's interim and final answers quoting the value arrive scrubbed.
func TestHostileOriginExpectContinue(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		auth := r.Header.Get("Authorization")
		return "HTTP/1.1 100 Continue " + auth + "\r\n\r\nHTTP/1.1 201 Created " + auth + "\r\nContent-Length: " + strconv.Itoa(len(auth)) + "\r\nConnection: close\r\n\r\n" + auth
	})
	ih := newHostileHarness(t, o)
	got := ih.rawExchange(t, "api.example.com", "POST / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer "+hostileTokenPH+"\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
	assertNoValue(t, "Expect", got)
	if e := o.last(t).Header.Get("Expect"); e != "" {
		t.Errorf("the origin received Expect: %q", e)
	}
	br := bufio.NewReader(strings.NewReader(got))
	for _, want := range []string{"100 Continue", "100 Continue Bearer " + hostileTokenPH, "201 Created Bearer " + hostileTokenPH} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%v: %q", err, got)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.Status != want || resp.StatusCode == 201 && string(body) != "Bearer "+hostileTokenPH {
			t.Errorf("%q %q, want %q", resp.Status, body, want)
		}
	}
}
