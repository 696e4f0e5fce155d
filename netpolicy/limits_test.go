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

// The tests in this file attack the proxy the way a hostile sandbox can,
// and check that each limit of ProxyConfig holds. None depends on the
// machine's speed: deadlines they rely on are either far away (minutes,
// so that they never fire) or the subject of the test, which then checks
// that the proxy cut the connection, never how quickly.

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

// TestSlowlorisHead: a client trickles header lines, one every 50 ms,
// never ending its head. With HeadTimeout at 1 s the proxy answers 408
// and closes the connection: the client reads the reply, then EOF, while
// it is still sending. The cut cannot come before the deadline, and does
// come (a read deadline of a minute bounds the wait).
func TestSlowlorisHead(t *testing.T) {
	const timeout = time.Second
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.HeadTimeout = timeout })
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	stop := make(chan struct{})
	trickled := make(chan int)
	go func() {
		n := 0
		defer func() { trickled <- n }()
		if _, err := io.WriteString(c, "GET http://a.test/ HTTP/1.1\r\n"); err != nil {
			return
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := fmt.Fprintf(c, "X-%d: y\r\n", n); err != nil {
				return
			}
			n++
		}
	}()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	elapsed := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("%s %q, want 408 and close", resp.Status, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the 408: %v, want EOF", err)
	}
	close(stop)
	n := <-trickled
	if elapsed < timeout {
		t.Errorf("cut after %v, before the %v deadline", elapsed, timeout)
	}
	if got := h.proxy.count.headTimeouts.Load(); got != 1 {
		t.Errorf("%d head timeouts counted, want 1", got)
	}
	t.Logf("cut after %v and %d header lines", elapsed, n)
}

// TestHeadTimeoutSparesTunnels: HeadTimeout bounds heads only. With it at
// 200 ms, a CONNECT tunnel and a SOCKS5 tunnel still carry data after a
// second of silence, and a kept-alive HTTP connection idle for a second
// between two requests serves the second one.
func TestHeadTimeoutSparesTunnels(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := tcpServer(t, echo)
	target := fmt.Sprintf("127.0.0.1:%d", srv)
	h := newHarnessWith(t, []string{"127.0.0.1"}, nil, func(c *ProxyConfig) { c.HeadTimeout = timeout })

	hc, br, resp := h.connect(target)
	defer hc.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	sc, code := h.socks5("127.0.0.1", srv)
	defer sc.Close()
	if code != socksSucceeded {
		t.Fatalf("SOCKS5: reply %d", code)
	}
	kc, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kbr := bufio.NewReader(kc)
	denied := func() int {
		fmt.Fprintf(kc, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
		kc.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(kbr, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("kept-alive connection: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := denied(); code != http.StatusForbidden {
		t.Fatalf("first request: %d", code)
	}

	time.Sleep(5 * timeout) // every head deadline, had one been left, has passed

	for name, rw := range map[string]struct {
		w net.Conn
		r io.Reader
	}{"CONNECT": {hc, br}, "SOCKS5": {sc, sc}} {
		rw.w.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(rw.w, "ping"); err != nil {
			t.Fatalf("%s tunnel: %v", name, err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(rw.r, got); err != nil || string(got) != "ping" {
			t.Errorf("%s tunnel: %q %v, want the echo", name, got, err)
		}
	}
	if code := denied(); code != http.StatusForbidden {
		t.Errorf("second request on the kept-alive connection: %d, want 403", code)
	}
	if got := h.proxy.count.headTimeouts.Load(); got != 0 {
		t.Errorf("%d head timeouts", got)
	}
}

// TestSOCKS5HandshakeTimeout: a SOCKS5 client that sends half a greeting
// is cut at HeadTimeout: the connection ends without a reply.
func TestSOCKS5HandshakeTimeout(t *testing.T) {
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.HeadTimeout = 500 * time.Millisecond })
	c, err := net.Dial("tcp", h.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{5}) // VER, and no NMETHODS
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF", n, err)
	}
	if got := h.proxy.count.headTimeouts.Load(); got != 1 {
		t.Errorf("%d head timeouts counted, want 1", got)
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

// TestAuditBudget: 1000 records into a 16 KiB budget: the log is at most
// 16 KiB, says once that it drops records and, at close, how many.
func TestAuditBudget(t *testing.T) {
	var buf syncBuffer
	var a auditLog
	const budget = 16 << 10
	a.init(&buf, discardLogger(), "sbx", budget)
	const n = 1000
	for i := range n {
		a.write(AuditRecord{Time: time.Now(), Sandbox: "sbx", Event: EventDecision, Proto: "connect",
			Host: fmt.Sprintf("h%d.example", i), Port: 443, Verdict: VerdictDeny, Reason: ReasonNotAllowed})
	}
	a.close(time.Now())
	a.write(AuditRecord{Event: EventDecision}) // after close: dropped, uncounted
	if buf.b.Len() > budget {
		t.Errorf("%d bytes, budget %d", buf.b.Len(), budget)
	}
	recs := buf.records(t)
	written := len(recs) - 2
	notice, last := recs[written], recs[written+1]
	if notice.Event != EventLimit || notice.Reason != ReasonAuditBudget || notice.Count != 0 || notice.Limit != budget {
		t.Errorf("notice %+v", notice)
	}
	if last.Event != EventLimit || last.Verdict != VerdictDropped || last.Count != int64(n-written) {
		t.Errorf("last record %+v, want %d dropped", last, n-written)
	}
	for _, r := range recs[:written] {
		if r.Event != EventDecision {
			t.Fatalf("record %+v before the notice", r)
		}
	}

	// A budget too small for the two budget records grows to fit them.
	var small syncBuffer
	var b auditLog
	b.init(&small, discardLogger(), "sbx", 1)
	b.write(AuditRecord{Event: EventDecision})
	b.close(time.Now())
	if recs := small.records(t); len(recs) != 2 || recs[1].Count != 1 || int64(small.b.Len()) > b.budget {
		t.Errorf("tiny budget: %+v in %d bytes (budget raised to %d)", recs, small.b.Len(), b.budget)
	}

	// No limit: every record is written.
	var all syncBuffer
	var u auditLog
	u.init(&all, discardLogger(), "sbx", math.MaxInt64)
	for range 100 {
		u.write(AuditRecord{Event: EventDecision})
	}
	u.close(time.Now())
	if recs := all.records(t); len(recs) != 100 {
		t.Errorf("no limit: %d records, want 100", len(recs))
	}
}

// TestDenialsBounded: 10,000 distinct destinations for two reasons fill
// MaxDenials entries, then one entry per reason counts the rest.
func TestDenialsBounded(t *testing.T) {
	d := denials{max: 4}
	for i := range 10_000 {
		reason := ReasonNotAllowed
		if i%2 == 1 {
			reason = ReasonPrivate
		}
		d.add(fmt.Sprintf("h%d.example", i), 443, reason)
	}
	d.add("h0.example", 443, ReasonNotAllowed)
	got := d.snapshot()
	want := []Denial{
		{"h0.example", 443, ReasonNotAllowed, 2}, {"h1.example", 443, ReasonPrivate, 1},
		{"h2.example", 443, ReasonNotAllowed, 1}, {"h3.example", 443, ReasonPrivate, 1},
		{"", 0, ReasonNotAllowed, 4998}, {"", 0, ReasonPrivate, 4998},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if s := Summary(got); !strings.Contains(s, "other destinations (not allowed, 4998 times)") {
		t.Errorf("Summary: %q", s)
	}
}

// TestSummaryBounded: whatever the denials hold (hosts and reasons of a
// megabyte with control characters, the largest counts), Summary is at
// most MaxSummaryLen bytes of printable ASCII.
func TestSummaryBounded(t *testing.T) {
	huge := strings.Repeat("\x1b[31m\xff", 200_000)
	var d []Denial
	for i := range 8 {
		d = append(d, Denial{Host: huge, Port: 65535, Reason: huge, Count: math.MaxInt / 16})
		if i == 0 {
			d = append(d, Denial{Reason: huge, Count: math.MaxInt / 16})
		}
	}
	s := Summary(d)
	if len(s) > MaxSummaryLen {
		t.Errorf("%d bytes, bound %d", len(s), MaxSummaryLen)
	}
	for i := 0; i < len(s); i++ {
		if !printable(s[i]) {
			t.Fatalf("byte %#x at %d", s[i], i)
		}
	}
	t.Logf("%d bytes: %.200s...", len(s), s)
}

// TestStoredHost: names a rule can match are kept as they are; others are
// escaped and cut to 253 bytes, and Summary leaves the result alone.
func TestStoredHost(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, c := range []struct{ in, want string }{
		{"example.com", "example.com"},
		{"2001:db8::1", "2001:db8::1"},
		{long[:253], long[:253]},
		{long[:254], long[:250] + "..."},
		{"a\x1b[31mb c", `a\x1b\x5b31mb\x20c`},
		{"fe80::1%eth0", `fe80::1\x25eth0`},
		{strings.Repeat("\n", 100), strings.Repeat(`\x0a`, 62) + "..."},
	} {
		got := storedHost(c.in)
		if got != c.want {
			t.Errorf("storedHost(%q) = %q, want %q", c.in, got, c.want)
		}
		if len(got) > maxNameLen {
			t.Errorf("storedHost(%q): %d bytes", c.in, len(got))
		}
		if clampText(got, maxNameLen) != got {
			t.Errorf("clampText changes %q", got)
		}
	}
	if got := recordHost("[" + long + "]"); got != `\x5b`+long[:246]+"..." {
		t.Errorf("recordHost: %q", got)
	}
	if got := recordHost("Example.COM."); got != "example.com" {
		t.Errorf("recordHost: %q", got)
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
