package netpolicy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func get(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, string(body)
}

// postEcho uploads body (payload's bytes) to the origin's /echo through c
// and checks that the origin received exactly payload. A body of a type
// net/http cannot size (an io.MultiReader) goes chunked.
func postEcho(t *testing.T, c *http.Client, url string, body io.Reader, payload []byte) {
	t.Helper()
	resp, err := c.Post(url, "application/octet-stream", body)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("len=%d sum=%x", len(payload), sha256.Sum256(payload)); string(got) != want {
		t.Errorf("upload: the origin saw %s, want %s", got, want)
	}
}

func expectDenied(t *testing.T, resp *http.Response, body, header, dest string) {
	t.Helper()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d (%s), want 403", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Tent-Denied"); got != header {
		t.Errorf("X-Tent-Denied = %q, want %q", got, header)
	}
	if !strings.Contains(body, "blocked "+dest) {
		t.Errorf("403 body %q does not name %s", body, dest)
	}
}

func TestHTTPForwardAllowed(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	c := h.client(nil)
	url := fmt.Sprintf("http://Allowed.Test.:%d/hello", o.port)
	resp, body := get(t, c, url, "Proxy-Authorization", "Basic c2VjcmV0", "Connection", "X-Hop", "X-Hop", "1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	want := fmt.Sprintf(`host=Allowed.Test.:%d path=/hello ua="Go-http-client/1.1" proxy-auth="" hop=""`, o.port)
	if body != want {
		t.Errorf("origin saw %s\nwant        %s", body, want)
	}
	if d := h.dialed(); len(d) != 1 || d[0] != fmt.Sprintf("127.0.0.1:%d", o.port) {
		t.Errorf("dials %v, want exactly the checked address", d)
	}
	// a streamed (chunked) request body of 4 MiB
	payload := make([]byte, 4<<20)
	rand.Read(payload)
	postEcho(t, c, fmt.Sprintf("http://allowed.test:%d/echo", o.port), io.MultiReader(bytes.NewReader(payload)), payload)
}

// TestHTTPStreams: a response body reaches the client as the origin writes
// it, not when the origin finishes: chunked, and with a Content-Length
// (which the proxy relays through its bulk path).
func TestHTTPStreams(t *testing.T) {
	for _, path := range []string{"/stream", "/stream-sized"} {
		t.Run(path[1:], func(t *testing.T) {
			o := newOrigin(t, false)
			release := sync.OnceFunc(func() { close(o.release) })
			defer release() // a failure must not leave the origin's handler waiting
			h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
			h.res.set("allowed.test", "127.0.0.1")
			resp, err := h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d%s", o.port, path))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if sized := resp.ContentLength == 13; sized != (path == "/stream-sized") {
				t.Fatalf("Content-Length %d", resp.ContentLength)
			}
			br := bufio.NewReader(resp.Body)
			done := make(chan string, 1)
			go func() { line, _ := br.ReadString('\n'); done <- line }()
			select {
			case line := <-done:
				if line != "first\n" {
					t.Fatalf("first line %q", line)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the first chunk did not arrive before the body ended")
			}
			release()
			if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
				t.Errorf("rest %q", rest)
			}
		})
	}
}

// A response body with neither a length nor chunking ends when the origin
// closes: it streams through the proxy, arrives whole, and the client's
// connection is closed after it (its end is the only end it has).
func TestHTTPCloseDelimitedBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 4 << 20
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	go func() { // a raw HTTP/1.1 origin: a head, "first\n", then n bytes, then close
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\nfirst\n")
		<-release
		c.Write(pattern(n))
	}()
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The head and the first bytes must come before the origin goes on.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port(t, "http://"+ln.Addr().String()))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the head did not arrive before the body ended: %v", err)
	}
	if resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Errorf("length %d, transfer encoding %v, close %v: want a body ended by the close",
			resp.ContentLength, resp.TransferEncoding, resp.Close)
	}
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
		t.Fatalf("the first bytes did not arrive before the body ended: %q %v", first, err)
	}
	close(release)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(rest, pattern(n)) {
		t.Fatalf("the rest: %d bytes (want %d), %v", len(rest), n, err)
	}
	if extra, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the body: %q, %v; want the connection closed", extra, err)
	}
}

// TestHTTPBulkBodies: large bodies with a Content-Length, both ways,
// arrive whole through plain forwarding (the bulk path: large buffers,
// written straight to the connection), the connection stays usable for
// the next request, and the audit log's close records count the bytes
// that crossed the upstream connections.
func TestHTTPBulkBodies(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	c := h.client(nil)
	const n = 16 << 20
	resp, err := c.Get(fmt.Sprintf("http://allowed.test:%d/blob?n=%d", o.port, n))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, pattern(n)) {
		t.Fatalf("download: %d bytes (want %d), equal %v, %v", len(got), n, bytes.Equal(got, pattern(n)), err)
	}
	payload := pattern(n / 2)
	postEcho(t, c, fmt.Sprintf("http://allowed.test:%d/echo", o.port), bytes.NewReader(payload), payload)
	c.CloseIdleConnections()
	// The close records (one per upstream connection) count the bodies
	// plus the heads.
	var up, down int64
	for deadline := time.Now().Add(5 * time.Second); down < n; {
		up, down = 0, 0
		for _, r := range h.audit.records(t) {
			if r.Event == EventClose {
				up, down = up+r.BytesUp, down+r.BytesDown
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if down < n || down > n+4096 || up < n/2 || up > n/2+4096 {
		t.Errorf("close records: bytes up %d down %d, want %d and %d plus headers", up, down, n/2, n)
	}
}

// A chunked body crosses the proxy whole, relayed in large chunks (one
// per read of the origin's, which are 1 MiB; a read ends at the end of a
// chunk) rather than re-chunked 32 KiB at a time. (A chunked upload is
// TestHTTPForwardAllowed's.)
func TestHTTPChunkedBodies(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil) // the origin's address, a private one
	h.res.set("allowed.test", "127.0.0.1")
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 16 << 20
	fmt.Fprintf(c, "GET http://allowed.test:%d/blob-chunked?n=%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", o.port, n)
	br := bufio.NewReader(c)
	head, err := textproto.NewReader(br).ReadLine()
	if err != nil || !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("status line %q: %v", head, err)
	}
	hdr, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil || hdr.Get("Transfer-Encoding") != "chunked" {
		t.Fatalf("head %v (%v): want a chunked body", hdr, err)
	}
	var body []byte
	largest := 0
	for {
		line, err := textproto.NewReader(br).ReadLine()
		if err != nil {
			t.Fatal(err)
		}
		size, err := strconv.ParseInt(line, 16, 64)
		if err != nil {
			t.Fatalf("chunk size line %q: %v", line, err)
		}
		if size == 0 {
			break
		}
		largest = max(largest, int(size))
		chunk := make([]byte, size+2)
		if _, err := io.ReadFull(br, chunk); err != nil || string(chunk[size:]) != "\r\n" {
			t.Fatalf("chunk of %d: %v", size, err)
		}
		body = append(body, chunk[:size]...)
	}
	if !bytes.Equal(body, pattern(n)) {
		t.Fatalf("download: %d bytes (want %d) not the origin's", len(body), n)
	}
	if largest <= 32<<10 {
		t.Errorf("largest chunk %d bytes: re-chunked at 32 KiB", largest)
	}
	t.Logf("largest chunk relayed: %d KiB", largest>>10)
}

// TestHTTPKeepAliveHosts: one client connection, several hosts, each
// request checked on its own.
func TestHTTPKeepAliveHosts(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "other.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	h.res.set("other.test", "127.0.0.1")
	h.res.set("denied.test", "127.0.0.1")
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, tc := range []struct {
		host string
		code int
	}{
		{"allowed.test", 200}, {"other.test", 200}, {"denied.test", 403}, {"allowed.test", 200}, {"allowed.test", 200},
	} {
		fmt.Fprintf(c, "GET http://%s:%d/n%d HTTP/1.1\r\nHost: %s\r\n\r\n", tc.host, o.port, i, tc.host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, tc.host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.code {
			t.Fatalf("request %d (%s): %d %s", i, tc.host, resp.StatusCode, body)
		}
		if tc.code == 200 && !strings.Contains(string(body), fmt.Sprintf("host=%s:%d path=/n%d", tc.host, o.port, i)) {
			t.Errorf("request %d: %s", i, body)
		}
	}
	if n := h.res.count("denied.test"); n != 0 {
		t.Errorf("denied.test was resolved %d times", n)
	}
	// the last two requests share one upstream connection
	if d := h.dialed(); len(d) != 3 {
		t.Errorf("dials %v, want 3 (allowed, other, allowed kept alive)", d)
	}
}

func TestCONNECTAllowed(t *testing.T) {
	o := newOrigin(t, true)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	c := h.client(&http.Transport{TLSClientConfig: o.tlsConfig()})
	resp, body := get(t, c, fmt.Sprintf("https://allowed.test:%d/secure", o.port))
	if resp.StatusCode != 200 || !strings.HasPrefix(body, fmt.Sprintf("host=allowed.test:%d path=/secure", o.port)) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if d := h.dialed(); len(d) != 1 || d[0] != fmt.Sprintf("127.0.0.1:%d", o.port) {
		t.Errorf("dials %v", d)
	}
}

func TestHTTPErrors(t *testing.T) {
	h := newHarness(t, []string{"allowed.test", "nowhere.test", "127.0.0.1"}, nil)
	closed := closedPort(t)
	h.res.set("allowed.test", "127.0.0.1")
	for _, tc := range []struct {
		req  string
		code int
	}{
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n\r\n", 502},
		{fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", closed), 502},
		{fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", closed), 502},
		{"CONNECT allowed.test:http HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"NONSENSE\r\n\r\n", 400},
	} {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, tc.req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != tc.code {
			t.Errorf("%q: %v %v, want %d", tc.req, resp, err, tc.code)
		}
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port(t, l.Addr().String())
	l.Close()
	return p
}

// TestHTTPRetriesStaleUpstream: an origin that drops a kept-alive
// connection between requests costs the client nothing.
func TestHTTPRetriesStaleUpstream(t *testing.T) {
	p := tcpServer(t, func(c *net.TCPConn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	h := newHarness(t, []string{"127.0.0.1"}, nil)
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 3 {
		fmt.Fprintf(c, "GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", p)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // let the origin's close arrive
	}
}
