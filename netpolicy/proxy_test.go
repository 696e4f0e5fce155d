package netpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// deniedEverywhere checks that host:port is refused by plain forwarding,
// CONNECT and SOCKS5 alike, with the given reason and rule.
func deniedEverywhere(t *testing.T, h *harness, host string, port int, reason, rule string) {
	t.Helper()
	dest := net.JoinHostPort(host, fmt.Sprint(port))
	header := reason + "; rule=" + rule
	resp, body := get(t, h.client(nil), "http://"+dest+"/")
	expectDenied(t, resp, body, header, dest)
	c, _, cresp := h.connect(dest)
	c.Close()
	if cresp.StatusCode != http.StatusForbidden || cresp.Header.Get("X-Tent-Denied") != header {
		t.Errorf("CONNECT %s: %d %q, want 403 %q", dest, cresp.StatusCode, cresp.Header.Get("X-Tent-Denied"), header)
	}
	sc, code := h.socks5(host, port)
	sc.Close()
	if code != socksNotAllowed {
		t.Errorf("SOCKS5 %s: reply %#x, want 0x02", dest, code)
	}
}

func TestDeniedNamesAreNeverResolved(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "*.example.test", "api.example.org:443", "127.0.0.1"}, nil)
	for _, name := range []string{"allowed.test", "denied.test", "example.test", "evilexample.test", "api.example.test", "api.example.org"} {
		h.res.set(name, "127.0.0.1")
	}
	deniedEverywhere(t, h, "denied.test", o.port, ReasonNotAllowed, "none")
	// wildcard look-alikes: the apex of *.example.test, and evilexample.test
	deniedEverywhere(t, h, "example.test", o.port, ReasonNotAllowed, "none")
	deniedEverywhere(t, h, "evilexample.test", o.port, ReasonNotAllowed, "none")
	// a port the rule does not name
	deniedEverywhere(t, h, "api.example.org", o.port, ReasonNotAllowed, "none")
	// an IP literal with no IP rule
	deniedEverywhere(t, h, "10.0.0.1", 80, ReasonNotAllowed, "none")
	for _, name := range []string{"denied.test", "example.test", "evilexample.test", "api.example.org"} {
		if n := h.res.count(name); n != 0 {
			t.Errorf("%s was resolved %d times", name, n)
		}
	}
	if d := h.dialed(); len(d) != 0 {
		t.Errorf("dials %v, want none", d)
	}
	// while a subdomain of the wildcard gets through
	if resp, body := get(t, h.client(nil), fmt.Sprintf("http://api.example.test:%d/", o.port)); resp.StatusCode != 200 {
		t.Errorf("api.example.test: %d %s", resp.StatusCode, body)
	}
	if s := Summary(h.proxy.Denied()); !strings.HasPrefix(s, "blocked 15 connections: denied.test:") {
		t.Errorf("Summary = %q", s)
	}
}

func TestDenyWins(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"*.example.test", "127.0.0.0/8"}, []string{"bad.example.test", "127.0.0.1"})
	h.res.set("bad.example.test", "127.0.0.2")
	h.res.set("ok.example.test", "127.0.0.1")
	deniedEverywhere(t, h, "bad.example.test", o.port, ReasonDenied, "bad.example.test")
	deniedEverywhere(t, h, "127.0.0.1", o.port, ReasonDenied, "127.0.0.1")
	// allowed name, but its address is denied
	deniedEverywhere(t, h, "ok.example.test", o.port, ReasonDenied, "127.0.0.1")
	if n := h.res.count("bad.example.test"); n != 0 {
		t.Errorf("bad.example.test was resolved %d times", n)
	}
}

// TestPrivateGuard: an allowed name that resolves to loopback, metadata or
// private addresses is refused unless an IP or CIDR rule names them.
func TestPrivateGuard(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "meta.test", "mapped.test"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	h.res.set("meta.test", "169.254.169.254,fd00:ec2::254")
	h.res.set("mapped.test", "::ffff:127.0.0.1")
	for _, name := range []string{"allowed.test", "meta.test", "mapped.test"} {
		deniedEverywhere(t, h, name, o.port, ReasonPrivate, "none")
		if n := h.res.count(name); n != 3 {
			t.Errorf("%s resolved %d times, want once per attempt", name, n)
		}
	}
	if d := h.dialed(); len(d) != 0 {
		t.Errorf("dials %v, want none", d)
	}
	h.setPolicy([]string{"allowed.test", "127.0.0.0/8"}, nil)
	if resp, body := get(t, h.client(nil), fmt.Sprintf("http://allowed.test:%d/", o.port)); resp.StatusCode != 200 {
		t.Errorf("with a CIDR rule: %d %s", resp.StatusCode, body)
	}
}

// TestNoRebinding: the proxy resolves once and dials the address it
// checked; a second answer pointing at loopback is caught by the guard.
func TestNoRebinding(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"rebind.test", "mixed.test"}, nil)
	h.res.set("rebind.test", "8.8.8.8", "127.0.0.1")
	h.res.set("mixed.test", "127.0.0.1,8.8.8.8")
	public := fmt.Sprintf("8.8.8.8:%d", o.port)
	h.remap[public] = fmt.Sprintf("127.0.0.1:%d", o.port)
	url := fmt.Sprintf("http://rebind.test:%d/", o.port)
	if resp, body := get(t, h.client(nil), url); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	if d := h.dialed(); len(d) != 1 || d[0] != public {
		t.Errorf("dials %v, want [%s]", d, public)
	}
	resp, body := get(t, h.client(nil), url)
	expectDenied(t, resp, body, "private address; rule=none", fmt.Sprintf("rebind.test:%d", o.port))
	if n := h.res.count("rebind.test"); n != 2 {
		t.Errorf("rebind.test resolved %d times, want 2 (once per request)", n)
	}
	// of several addresses, only those that pass are dialled
	if resp, body := get(t, h.client(nil), fmt.Sprintf("http://mixed.test:%d/", o.port)); resp.StatusCode != 200 {
		t.Fatalf("mixed: %d %s", resp.StatusCode, body)
	}
	if d := h.dialed(); len(d) != 2 || d[1] != public {
		t.Errorf("dials %v, want the public address only", d)
	}
}

func TestSetPolicy(t *testing.T) {
	o := newOrigin(t, false)
	to := newOrigin(t, true)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	url := fmt.Sprintf("http://allowed.test:%d/", o.port)
	tr := &http.Transport{TLSClientConfig: to.tlsConfig()}
	surl := fmt.Sprintf("https://allowed.test:%d/", to.port)
	if resp, _ := get(t, h.client(tr), surl); resp.StatusCode != 200 {
		t.Fatalf("before: %d", resp.StatusCode)
	}
	// a kept-alive connection sees the change on its next request
	c := h.client(nil)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	if resp, _ := get(t, c, url); resp.StatusCode != 200 {
		t.Fatalf("before: %d", resp.StatusCode)
	}
	h.setPolicy([]string{"127.0.0.1"}, []string{"allowed.test"})
	resp, body := get(t, c, url)
	expectDenied(t, resp, body, "denied by rule; rule=allowed.test", fmt.Sprintf("allowed.test:%d", o.port))
	if _, err := h.client(tr).Get(surl); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT after the change: %v", err)
	}
	if _, code := h.socks5("allowed.test", o.port); code != socksNotAllowed {
		t.Errorf("SOCKS5 after the change: %#x", code)
	}
	h.proxy.SetPolicy(nil)
	resp, body = get(t, c, url)
	expectDenied(t, resp, body, "network disabled; rule=none", fmt.Sprintf("allowed.test:%d", o.port))
	c.CloseIdleConnections()
}

func TestSOCKS5(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1", "::1", "nowhere.test"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	roundTrip := func(host string, port int) string {
		c, code := h.socks5(host, port)
		defer c.Close()
		if code != socksSucceeded {
			t.Fatalf("SOCKS5 %s: reply %#x", host, code)
		}
		fmt.Fprintf(c, "GET /s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", net.JoinHostPort(host, fmt.Sprint(port)))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if r := roundTrip("allowed.test", o.port); !strings.Contains(r, fmt.Sprintf("host=allowed.test:%d path=/s", o.port)) {
		t.Errorf("domain: %q", r)
	}
	if r := roundTrip("127.0.0.1", o.port); !strings.Contains(r, fmt.Sprintf("host=127.0.0.1:%d path=/s", o.port)) {
		t.Errorf("IPv4: %q", r)
	}
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Logf("no IPv6 loopback, IPv6 SOCKS5 address untested: %v", err)
	} else {
		srv := &http.Server{Handler: o.Config.Handler}
		go srv.Serve(l)
		defer srv.Close()
		p6 := port(t, l.Addr().String())
		if r := roundTrip("::1", p6); !strings.Contains(r, fmt.Sprintf("host=[::1]:%d path=/s", p6)) {
			t.Errorf("IPv6: %q", r)
		}
	}
	// protocol refusals
	for _, tc := range []struct {
		name string
		send []byte
		want []byte
	}{
		{"no acceptable method", []byte{5, 1, 2}, []byte{5, 0xff}},
		{"BIND", []byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, 7}},
		{"UDP ASSOCIATE", []byte{5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, 7}},
		{"bad address type", []byte{5, 1, 0, 5, 1, 0, 9}, []byte{5, 0, 5, 8}},
	} {
		c, err := net.Dial("tcp", h.socksAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.send)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if !bytes.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %v, want %v...", tc.name, got, tc.want)
		}
	}
	if _, code := h.socks5("127.0.0.1", closedPort(t)); code != socksConnRefused {
		t.Errorf("closed port: reply %#x, want 0x05", code)
	}
	if _, code := h.socks5("nowhere.test", 80); code != socksHostUnreachable {
		t.Errorf("unresolvable: reply %#x, want 0x04", code)
	}
}

// TestHalfClose: a client that shuts down its write side still reads the
// answer, through CONNECT and SOCKS5.
func TestHalfClose(t *testing.T) {
	p := tcpServer(t, countThenReply)
	h := newHarness(t, []string{"127.0.0.1"}, nil)
	payload := make([]byte, 100_000)
	check := func(name string, c net.Conn, r io.Reader) {
		defer c.Close()
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(r); string(b) != "got 100000" {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	c, br, resp := h.connect(fmt.Sprintf("127.0.0.1:%d", p))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	check("CONNECT", c, br)
	sc, code := h.socks5("127.0.0.1", p)
	if code != 0 {
		t.Fatalf("SOCKS5 reply %#x", code)
	}
	check("SOCKS5", sc, sc)
}

func TestAuditLog(t *testing.T) {
	o := newOrigin(t, true)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	resp, _ := get(t, h.client(&http.Transport{TLSClientConfig: o.tlsConfig()}), fmt.Sprintf("https://allowed.test:%d/", o.port))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for deadline := time.Now().Add(5 * time.Second); len(h.audit.records(t)) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("no close record")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sc, _ := h.socks5("evil.example", 443)
	sc.Close()
	h.proxy.Close()
	recs := h.audit.records(t)
	if len(recs) != 3 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	addr := "127.0.0.1"
	want := []AuditRecord{
		{Sandbox: "sbx-test", Event: EventDecision, Proto: "connect", Host: "allowed.test", Port: o.port, Addr: addr, Verdict: VerdictAllow, Rule: "allowed.test", Reason: ReasonAllowed},
		{Sandbox: "sbx-test", Event: EventClose, Proto: "connect", Host: "allowed.test", Port: o.port, Addr: addr, Verdict: VerdictAllow, Rule: "allowed.test", Reason: ReasonAllowed},
		{Sandbox: "sbx-test", Event: EventDecision, Proto: "socks5", Host: "evil.example", Port: 443, Verdict: VerdictDeny, Reason: ReasonNotAllowed},
	}
	for i, r := range recs {
		if r.Time.IsZero() || time.Since(r.Time) > time.Minute {
			t.Errorf("record %d: time %v", i, r.Time)
		}
		if i == 1 && (r.BytesUp < 100 || r.BytesDown < 1000) {
			t.Errorf("close record: bytes up %d down %d, want a TLS handshake's worth", r.BytesUp, r.BytesDown)
		}
		r.Time, r.BytesUp, r.BytesDown = time.Time{}, 0, 0
		if !reflect.DeepEqual(r, want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, r, want[i])
		}
	}
	if s := Summary(h.proxy.Denied()); s != "blocked 1 connection: evil.example:443 (not allowed)" {
		t.Errorf("Summary = %q", s)
	}
}

// TestCloseLeavesNothing: Close ends tunnels, idle and half-open client
// connections and the serve loops, and every goroutine of the proxy.
func TestCloseLeavesNothing(t *testing.T) {
	o := newOrigin(t, false)
	holdPort := tcpServer(t, hold)
	base := runtime.NumGoroutine()
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	var conns []net.Conn
	c, _, resp := h.connect(fmt.Sprintf("127.0.0.1:%d", holdPort)) // open tunnel
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	conns = append(conns, c)
	sc, code := h.socks5("127.0.0.1", holdPort) // open SOCKS5 tunnel
	if code != 0 {
		t.Fatalf("%#x", code)
	}
	conns = append(conns, sc)
	idle, err := net.Dial("tcp", h.httpAddr) // kept alive after a request
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(idle, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", o.port)
	if _, err := http.ReadResponse(bufioReader(idle), nil); err != nil {
		t.Fatal(err)
	}
	conns = append(conns, idle)
	for _, addr := range []string{h.socksAddr, h.httpAddr} { // connected, silent
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(50 * time.Millisecond) // let the proxy accept them all
	closeWithin(t, h.proxy, 5*time.Second)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); isTimeout(err) {
			t.Errorf("connection %d was not closed: %v", i, err)
		}
		c.Close()
	}
	waitGoroutines(t, base)
	if err := h.proxy.ServeHTTP(&net.TCPListener{}); err != ErrProxyClosed {
		t.Errorf("Serve after Close = %v", err)
	}
}

// TestPauseResume: a paused proxy accepts nothing (a new connection waits
// in the backlog, unanswered, and Active does not count it), counts the
// connections it already holds, and serves the waiting connection once
// resumed. Close ends a paused proxy.
func TestPauseResume(t *testing.T) {
	o := newOrigin(t, false)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, nil)
	h.res.set("allowed.test", "127.0.0.1")
	target := fmt.Sprintf("allowed.test:%d", o.port)

	open, _, resp := h.connect(target)
	defer open.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	held := h.proxy.Active() // the tunnel's two ends
	if held == 0 {
		t.Fatal("an open tunnel is not counted")
	}
	if err := h.proxy.Pause(); err != nil {
		t.Fatal(err)
	}
	if n := h.proxy.Active(); n != held {
		t.Fatalf("paused with one tunnel open: Active = %d, want %d", n, held)
	}
	c, err := net.Dial("tcp", h.httpAddr) // the kernel completes it: backlog
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a paused proxy answered: %d bytes, %v", n, err)
	}
	if n := h.proxy.Active(); n != held {
		t.Fatalf("paused: Active = %d, want %d (the waiting connection is not accepted)", n, held)
	}

	h.proxy.Resume()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	const ok = "HTTP/1.1 200 Connection established\r\n\r\n"
	got := make([]byte, len(ok))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != ok {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	if n := h.proxy.Active(); n != 2*held {
		t.Fatalf("after Resume: Active = %d, want %d", n, 2*held)
	}

	if err := h.proxy.Pause(); err != nil {
		t.Fatal(err)
	}
	closeWithin(t, h.proxy, 5*time.Second)
}
