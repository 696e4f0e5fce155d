package netpolicy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file and the other limits_*_test.go files attack the
// proxy the way a hostile sandbox can, and check that each limit of
// ProxyConfig holds. None depends on the machine's speed: deadlines they
// rely on are either far away (minutes, so that they never fire) or the
// subject of the test, which then checks that the proxy cut the
// connection, never how quickly.

// heapInUse returns the bytes of heap in use after two collections.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// waitFor polls cond until it holds, failing the test after a generous
// minute (it is a liveness bound, never a measure).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unread returns the bytes waiting in c's receive queue (SIOCINQ).
func unread(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return -1
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n
}

// clientConns returns the proxy's client connections (the accepted ones,
// not the upstream ones: these tests open none).
func (p *Proxy) clientConns() []net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

// statusOf reads the first 12 bytes of c ("HTTP/1.1 NNN") and returns the
// status code, or -1 if c ended first.
func statusOf(c net.Conn) int {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	var b [12]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || !bytes.HasPrefix(b[:], []byte("HTTP/1.1 ")) {
		return -1
	}
	var code int
	fmt.Sscanf(string(b[9:12]), "%d", &code)
	return code
}

// TestConnLimit: with MaxConns 3 and three connections held open, a
// fourth HTTP one gets 503 and EOF, a SOCKS5 one EOF without a byte, and
// neither is served; the refusals are counted in Denied and audited once
// (and once more by Close with their number). When a held connection
// closes, the next one is served.
func TestConnLimit(t *testing.T) {
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.MaxConns = 3
		c.HeadTimeout = 10 * time.Minute
	})
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, "three connections served", func() bool { return h.proxy.Active() == 3 })

	for i := range 2 {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Minute))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("HTTP connection %d over the limit: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "limit 3") {
			t.Errorf("HTTP connection %d over the limit: %s %q, want 503", i, resp.Status, body)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("HTTP connection %d over the limit: %v after the 503, want EOF", i, err)
		}
		c.Close()
	}
	sc, err := net.Dial("tcp", h.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	sc.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := sc.Read(make([]byte, 16)); n != 0 || err != io.EOF {
		t.Errorf("SOCKS5 connection over the limit: %d bytes, %v; want EOF", n, err)
	}
	sc.Close()

	want := []Denial{{Reason: ReasonTooManyConns, Count: 3}}
	if d := h.proxy.Denied(); fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("Denied() = %v, want %v", d, want)
	}
	if s := Summary(h.proxy.Denied()); s != "blocked 3 connections: too many connections (3 refused)" {
		t.Errorf("Summary: %q", s)
	}
	recs := h.audit.records(t)
	if len(recs) != 1 || recs[0].Event != EventLimit || recs[0].Proto != "http" || recs[0].Verdict != VerdictDeny ||
		recs[0].Reason != ReasonTooManyConns || recs[0].Limit != 3 {
		t.Errorf("audit records %+v, want one limit record", recs)
	}

	held[0].Close()
	waitFor(t, "a held connection to go", func() bool { return h.proxy.Active() == 2 })
	c, _, resp := h.connect("evil.example:443")
	c.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("connection after one closed: %s, want 403 (served, refused by the policy)", resp.Status)
	}

	if err := h.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	recs = h.audit.records(t)
	last := recs[len(recs)-1]
	if last.Event != EventLimit || last.Reason != ReasonTooManyConns || last.Count != 3 || last.Limit != 3 {
		t.Errorf("last record %+v, want the count of refusals", last)
	}
}

// TestLimitDefaults: zero picks the defaults, negative lifts the limit.
func TestLimitDefaults(t *testing.T) {
	l := resolveLimits(&ProxyConfig{})
	if l != (limits{DefaultMaxConns, DefaultMaxHeaderBytes, DefaultHeadTimeout, DefaultMaxDenials, DefaultAuditBytes}) {
		t.Errorf("defaults: %+v", l)
	}
	l = resolveLimits(&ProxyConfig{MaxConns: -1, MaxHeaderBytes: -1, HeadTimeout: -1, MaxDenials: -1, AuditBytes: -1})
	if l != (limits{math.MaxInt64, math.MaxInt64, 0, math.MaxInt64, math.MaxInt64}) || !l.deadline(time.Now()).IsZero() {
		t.Errorf("no limits: %+v", l)
	}
	l = resolveLimits(&ProxyConfig{MaxConns: 7, MaxHeaderBytes: 8, HeadTimeout: 9, MaxDenials: 10, AuditBytes: 11})
	if l != (limits{7, 8, 9, 10, 11}) {
		t.Errorf("set: %+v", l)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
