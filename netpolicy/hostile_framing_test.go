package netpolicy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

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
