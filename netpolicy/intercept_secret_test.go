package netpolicy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

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
