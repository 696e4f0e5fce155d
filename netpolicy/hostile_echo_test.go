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
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

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
