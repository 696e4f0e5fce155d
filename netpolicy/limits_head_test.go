package netpolicy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSlowHeadersAttack is the reproduced attack: 1000 connections at once,
// each sending a header line of 1 MB that it never finishes. Under
// default limits the proxy serves 256 of them (MaxConns) and answers the
// other 744 with 503 at once; while the 256 hold their unfinished head as
// large as it may grow (60 KiB of the 64 KiB MaxHeaderBytes, all read by
// the proxy), its heap grows by less than MaxConns × (3 × MaxHeaderBytes
// + 16 KiB) = 52 MiB (on main: 1 GiB and more); when they go on past
// 64 KiB each gets 431. Audit: one "limit" record, whatever the number of
// refusals.
//
// The second shape sends the 60 KiB as 255 fields of 240 bytes, each of
// which net/textproto parses into the header map as it arrives, and then
// goes on with more fields, to be cut at 256 (maxHeaderFields).
func TestSlowHeadersAttack(t *testing.T) {
	line := []byte("GET http://a.test/ HTTP/1.1\r\nX-Pad: ")
	t.Run("long line", func(t *testing.T) {
		slowHeads(t, line, bytes.Repeat([]byte{'a'}, 1<<20))
	})
	var fields []byte
	for i := 0; len(fields) < 1<<20; i++ {
		fields = fmt.Appendf(fields, "X-Field-%06d: %0225d\r\n", i, i)
	}
	t.Run("many fields", func(t *testing.T) {
		slowHeads(t, []byte("GET http://a.test/ HTTP/1.1\r\n"), fields)
	})
	// 30 KiB in 250 fields, parsed, then a line that never ends.
	mixed := fields[:250*len("X-Field-000000: \r\n")+250*225/2]
	mixed = append(mixed[:len(mixed):len(mixed)], "\r\nX-Long: "...)
	mixed = append(mixed, bytes.Repeat([]byte{'a'}, 1<<20)...)
	t.Run("fields then a long line", func(t *testing.T) {
		slowHeads(t, []byte("GET http://a.test/ HTTP/1.1\r\n"), mixed)
	})
}

// slowHeads runs TestSlowHeadersAttack with heads that start with line
// and go on with pad.
func slowHeads(t *testing.T, line, pad []byte) {
	const n = 1000
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.HeadTimeout = 10 * time.Minute // never fires: this test is not about time
	})
	p := h.proxy
	held := 60 << 10 // of the head, before the second phase

	before := heapInUse()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.DialTimeout("tcp", h.httpAddr, time.Minute)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		// The kernel's buffers take 60 KiB whether or not the proxy reads;
		// a refused connection may fail the write, which is fine.
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		c.Write(append(line, pad[:held-len(line)]...))
	}
	waitFor(t, "the proxy to serve DefaultMaxConns connections", func() bool {
		return p.count.refusedConns.Load() == n-DefaultMaxConns && p.Active() == DefaultMaxConns
	})
	waitFor(t, "the proxy to read every byte sent on the connections it serves", func() bool {
		for _, c := range p.clientConns() {
			if unread(c) != 0 {
				return false
			}
		}
		return true
	})
	grown := int64(heapInUse()) - int64(before)
	bound := int64(DefaultMaxConns * (3*DefaultMaxHeaderBytes + 16<<10))
	t.Logf("heap grew by %.1f MiB with %d connections holding %d KiB of head (bound %.0f MiB)",
		float64(grown)/(1<<20), DefaultMaxConns, held>>10, float64(bound)/(1<<20))
	if grown > bound {
		t.Errorf("heap grew by %d bytes, bound %d", grown, bound)
	}

	// The rest of the megabyte: every connection the proxy serves gets 431,
	// every other one got 503.
	for _, c := range conns {
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		c.Write(pad[held:])
	}
	codes := map[int]int{}
	for _, c := range conns {
		codes[statusOf(c)]++
	}
	if want := map[int]int{431: DefaultMaxConns, 503: n - DefaultMaxConns}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("statuses %v, want %v", codes, want)
	}
	if got := p.count.headTooLarge.Load(); got != DefaultMaxConns {
		t.Errorf("%d heads too large, want %d", got, DefaultMaxConns)
	}
	var limitRecs []AuditRecord
	for _, r := range h.audit.records(t) {
		if r.Event == EventLimit {
			limitRecs = append(limitRecs, r)
		}
	}
	if len(limitRecs) != 1 || limitRecs[0].Reason != ReasonTooManyConns || limitRecs[0].Limit != DefaultMaxConns {
		t.Errorf("limit records %+v, want one for too many connections (limit %d)", limitRecs, DefaultMaxConns)
	}
	want := []Denial{{Reason: ReasonTooManyConns, Count: n - DefaultMaxConns}}
	if d := p.Denied(); fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("Denied() = %v, want %v", d, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	recs := h.audit.records(t)
	last := recs[len(recs)-1]
	if last.Event != EventLimit || last.Reason != ReasonTooManyConns || last.Count != n-DefaultMaxConns {
		t.Errorf("last record %+v, want the count of refused connections, %d", last, n-DefaultMaxConns)
	}
}

// TestLongNamesAttack: denied CONNECTs of distinct 200 KB host names, one
// after the other on a kept-alive connection, with MaxHeaderBytes raised so
// that they reach the policy (by default they are 431, see
// TestLongNameHeadLimit). Each is refused as an invalid host without a
// lookup; records keep at most 253 bytes of a name; the denial table keeps
// 256 destinations and counts the rest in one entry; Summary stays within
// MaxSummaryLen; the audit log stays within its 64 KiB budget and ends
// with the count of the records it dropped. On main the table kept every
// name whole (0.6-1.1 GiB for 2000) and the audit log took 600 MiB.
func TestLongNamesAttack(t *testing.T) {
	const n = 300
	const budget = 64 << 10
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.MaxHeaderBytes = 256 << 10
		c.AuditBytes = budget
		c.HeadTimeout = 10 * time.Minute
	})
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	tail := strings.Repeat("x", 200_000)
	before := heapInUse()
	for i := range n {
		name := fmt.Sprintf("n%04d", i) + tail
		fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\n\r\n", name) // no Host: 200 KB less to send
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Tent-Denied") != ReasonInvalidHost+"; rule=none" {
			t.Fatalf("request %d: %s %q %q", i, resp.Status, resp.Header.Get("X-Tent-Denied"), body)
		}
		if len(body) > 512 {
			t.Fatalf("request %d: a %d-byte body", i, len(body))
		}
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew by %d KiB after %d refusals of 200 KB names", grown>>10, n)
	if grown > 4<<20 {
		t.Errorf("heap grew by %d bytes after the refusals, bound 4 MiB", grown)
	}
	if len(h.res.calls) != 0 {
		t.Errorf("resolver asked about %d names", len(h.res.calls))
	}

	d := h.proxy.Denied()
	if len(d) != DefaultMaxDenials+1 {
		t.Fatalf("%d denial entries, want %d", len(d), DefaultMaxDenials+1)
	}
	total := 0
	for i, x := range d[:DefaultMaxDenials] {
		want := fmt.Sprintf("n%04d", i) + tail[:maxNameLen-3-5] + "..."
		if x.Host != want || x.Port != 443 || x.Reason != ReasonInvalidHost || x.Count != 1 {
			t.Fatalf("entry %d: %q:%d %s %d; want the name cut to %d bytes", i, x.Host, x.Port, x.Reason, x.Count, maxNameLen)
		}
		total += x.Count
	}
	if other := d[DefaultMaxDenials]; other != (Denial{Reason: ReasonInvalidHost, Count: n - DefaultMaxDenials}) {
		t.Errorf("last entry %+v, want the other destinations", other)
	}
	s := Summary(d)
	if len(s) > MaxSummaryLen || !strings.HasPrefix(s, fmt.Sprintf("blocked %d connections: n0000xxx", n)) ||
		!strings.HasSuffix(s, fmt.Sprintf(", and %d more destinations", DefaultMaxDenials+1-5)) {
		t.Errorf("Summary: %d bytes: %q", len(s), s)
	}

	if err := h.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	h.audit.mu.Lock()
	size := h.audit.b.Len()
	h.audit.mu.Unlock()
	if size > budget {
		t.Errorf("audit log of %d bytes, budget %d", size, budget)
	}
	recs := h.audit.records(t)
	decisions, notices := 0, 0
	for _, r := range recs {
		switch {
		case r.Event == EventDecision:
			decisions++
			if len(r.Host) > maxNameLen {
				t.Errorf("audit record with a %d-byte host", len(r.Host))
			}
		case r.Event == EventLimit && r.Reason == ReasonAuditBudget && r.Count == 0:
			notices++
		}
	}
	last := recs[len(recs)-1]
	if notices != 1 || decisions == 0 || last.Event != EventLimit || last.Verdict != VerdictDropped ||
		last.Reason != ReasonAuditBudget || last.Limit != budget || last.Count != int64(n-decisions) {
		t.Errorf("%d decisions, %d budget notices, last record %+v; want 1 notice and a last record counting %d dropped",
			decisions, notices, last, n-decisions)
	}
	t.Logf("audit: %d bytes, %d decisions written, %d dropped", size, decisions, last.Count)
}

// TestLongNameHeadLimit: under default limits a CONNECT with a 200 KB name
// is a head over MaxHeaderBytes: 431, the connection closed, and nothing
// recorded or looked up.
func TestLongNameHeadLimit(t *testing.T) {
	h := newHarness(t, nil, nil)
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := strings.Repeat("x", 200_000)
	go fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", name, name)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close {
		t.Errorf("%s (close %v), want 431 and close", resp.Status, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the 431: %v, want EOF", err)
	}
	if d := h.proxy.Denied(); len(d) != 0 {
		t.Errorf("Denied() = %v", d)
	}
	if recs := h.audit.records(t); len(recs) != 0 || len(h.res.calls) != 0 {
		t.Errorf("%d audit records, %d lookups", len(recs), len(h.res.calls))
	}
}

// TestHeadWithinLimit: heads just within the limits (a 60 KiB cookie; 256
// header fields) are served, and one field more is 431.
func TestHeadWithinLimit(t *testing.T) {
	h := newHarness(t, nil, nil)
	fields := func(n int) string {
		var b strings.Builder
		for i := range n - 1 {
			fmt.Fprintf(&b, "X-%d: y\r\n", i)
		}
		return b.String()
	}
	for _, c := range []struct {
		name, extra string
		want        int
	}{
		{"60 KiB cookie", "Cookie: " + strings.Repeat("c", 60<<10) + "\r\n", http.StatusForbidden},
		{"256 fields", fields(maxHeaderFields), http.StatusForbidden},
		{"257 fields", fields(maxHeaderFields + 1), http.StatusRequestHeaderFieldsTooLarge},
	} {
		conn, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		go fmt.Fprintf(conn, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n%s\r\n", c.extra)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.StatusCode != c.want {
			t.Errorf("%s: %s, want %d", c.name, resp.Status, c.want)
		}
	}
}

// TestSOCKS5LongName: the longest name SOCKS5 can carry (255 bytes) is
// refused with reply 0x02 as an invalid host, never looked up, and
// recorded cut to 253 bytes.
func TestSOCKS5LongName(t *testing.T) {
	h := newHarness(t, []string{"*.example.com"}, nil)
	name := strings.Repeat("a", 243) + ".example.com"
	c, code := h.socks5(name, 443)
	c.Close()
	if code != socksNotAllowed {
		t.Errorf("reply %d, want %d", code, socksNotAllowed)
	}
	if h.res.count(name) != 0 {
		t.Error("the name was looked up")
	}
	want := []Denial{{Host: name[:maxNameLen-3] + "...", Port: 443, Reason: ReasonInvalidHost, Count: 1}}
	if d := h.proxy.Denied(); fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("Denied() = %v, want %v", d, want)
	}
}

// TestResponseHeadTooLarge: on plain forwarding, an origin whose response
// head does not end within MaxHeaderBytes gets its client a 502, not a
// proxy that buffers it.
func TestResponseHeadTooLarge(t *testing.T) {
	srv := tcpServer(t, func(c *net.TCPConn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
		pad := bytes.Repeat([]byte{'a'}, 64<<10)
		for range 64 { // 4 MiB, unless the proxy hangs up first
			if _, err := c.Write(pad); err != nil {
				return
			}
		}
	})
	h := newHarness(t, []string{"127.0.0.1"}, nil)
	resp, err := h.client(nil).Get(fmt.Sprintf("http://127.0.0.1:%d/", srv))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "response head larger than 65536 bytes") {
		t.Errorf("%s %q, want 502", resp.Status, body)
	}
}
