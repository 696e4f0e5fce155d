package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeResolver answers from a table and counts the questions. A name with
// several answers gives them in turn (the last one repeats), which is how a
// rebinding DNS server behaves.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newResolver() *fakeResolver {
	return &fakeResolver{answers: map[string][][]netip.Addr{}, calls: map[string]int{}}
}

func (r *fakeResolver) set(name string, answers ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var as [][]netip.Addr
	for _, a := range answers {
		var addrs []netip.Addr
		for _, s := range strings.Split(a, ",") {
			addrs = append(addrs, netip.MustParseAddr(s))
		}
		as = append(as, addrs)
	}
	r.answers[name] = as
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.calls[host]
	r.calls[host]++
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as[min(n, len(as)-1)], nil
}

func (r *fakeResolver) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[name]
}

// syncBuffer is an io.Writer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []AuditRecord {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AuditRecord
	for _, line := range strings.Split(strings.TrimSuffix(s.b.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// harness is a proxy serving an HTTP and a SOCKS5 listener on loopback,
// with a fake resolver, a recording dialer and an audit buffer.
type harness struct {
	t         *testing.T
	proxy     *Proxy
	httpAddr  string
	socksAddr string
	res       *fakeResolver
	audit     *syncBuffer

	mu    sync.Mutex
	dials []string
	// remap redirects dials to addresses the test pretends are public to
	// the test's loopback servers.
	remap map[string]string
}

func newHarness(t *testing.T, allow, deny []string) *harness {
	t.Helper()
	return newHarnessWith(t, allow, deny, nil)
}

// newHarnessWith is newHarness with set, if not nil, changing the
// configuration (its limits) before the proxy is made.
func newHarnessWith(t *testing.T, allow, deny []string, set func(*ProxyConfig)) *harness {
	t.Helper()
	h := &harness{t: t, res: newResolver(), audit: &syncBuffer{}, remap: map[string]string{}}
	d := &net.Dialer{Timeout: 5 * time.Second}
	cfg := ProxyConfig{
		Policy:    mustCompile(t, allow, deny),
		SandboxID: "sbx-test",
		Resolver:  h.res,
		Audit:     h.audit,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h.mu.Lock()
			h.dials = append(h.dials, addr)
			if to, ok := h.remap[addr]; ok {
				addr = to
			}
			h.mu.Unlock()
			return d.DialContext(ctx, network, addr)
		},
	}
	if set != nil {
		set(&cfg)
	}
	h.proxy = NewProxy(cfg)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.httpAddr, h.socksAddr = hl.Addr().String(), sl.Addr().String()
	errs := make(chan error, 2)
	go func() { errs <- h.proxy.ServeHTTP(hl) }()
	go func() { errs <- h.proxy.ServeSOCKS5(sl) }()
	t.Cleanup(func() {
		if err := h.proxy.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			// A Serve that had not started when Close ran refuses its
			// listener with ErrProxyClosed (a test quicker than the
			// goroutines), and leaves it to be closed here.
			if err := <-errs; err != nil && !errors.Is(err, ErrProxyClosed) {
				t.Errorf("Serve returned %v", err)
			}
		}
		hl.Close()
		sl.Close()
	})
	return h
}

func (h *harness) setPolicy(allow, deny []string) { h.proxy.SetPolicy(mustCompile(h.t, allow, deny)) }

func (h *harness) dialed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.dials...)
}

// client returns an HTTP client that uses the proxy for http and https.
func (h *harness) client(tr *http.Transport) *http.Client {
	if tr == nil {
		tr = &http.Transport{}
	}
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: h.httpAddr})
	tr.DisableKeepAlives = true
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// connect opens a CONNECT tunnel to target and returns the connection and
// the proxy's response.
func (h *harness) connect(target string) (net.Conn, *bufio.Reader, *http.Response) {
	h.t.Helper()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		h.t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		h.t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return c, br, resp
}

// socks5 performs a SOCKS5 CONNECT to host:port (atyp 3 for names, 1 or
// 4 for IP literals) and returns the connection and the reply code.
func (h *harness) socks5(host string, port int) (net.Conn, byte) {
	h.t.Helper()
	c, err := net.Dial("tcp", h.socksAddr)
	if err != nil {
		h.t.Fatal(err)
	}
	code, err := socksConnect(c, host, port)
	if err != nil {
		h.t.Fatalf("SOCKS5 %s:%d: %v", host, port, err)
	}
	return c, code
}

func socksConnect(c net.Conn, host string, port int) (byte, error) {
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return 0, err
	}
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil {
		return 0, err
	}
	if m != [2]byte{5, 0} {
		return 0, fmt.Errorf("method reply %v", m)
	}
	req := []byte{5, 1, 0}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		req = append(append(req, 1), ip.AsSlice()...)
	} else if err == nil {
		req = append(append(req, 4), ip.AsSlice()...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = append(req, byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return 0, err
	}
	return rep[1], nil
}

// port returns the port of a "host:port" or URL string.
func port(t testing.TB, s string) int {
	t.Helper()
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		s = u.Host
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return int(ap.Port())
}

// waitGoroutines polls until the number of goroutines falls back to base.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, want <= %d:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// closeWithin closes p and fails the test if Close errs or takes longer
// than d.
func closeWithin(t *testing.T, p *Proxy, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}
