package netpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/benchstat"
)

// interceptBench is an HTTPS origin for any name under its own CA, and
// two proxies allowing bench.example (resolved to loopback): one that
// tunnels it, one that intercepts it (a secret is bound to it). Clients
// trust the origin's CA for the first and the proxy's for the second.
type interceptBench struct {
	origin  *httptest.Server
	port    int
	plain   *http.Transport
	icpt    *http.Transport
	blobLen int
}

func newInterceptBench(b *testing.B, blobLen int) *interceptBench {
	b.Helper()
	upCA, err := NewCA("bench-upstream")
	if err != nil {
		b.Fatal(err)
	}
	blob := pattern(blobLen)
	ib := &interceptBench{blobLen: blobLen}
	ib.origin = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/blob" {
			w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
			w.Write(blob)
			return
		}
		io.WriteString(w, "x")
	}))
	ib.origin.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.leaf(h.ServerName) }}
	ib.origin.StartTLS()
	b.Cleanup(ib.origin.Close)
	ib.port = port(b, ib.origin.URL)
	upRoots := x509.NewCertPool()
	upRoots.AddCert(upCA.Certificate())
	res := newResolver()
	res.set("bench.example", "127.0.0.1")
	proxy := func(secrets []Secret, ca *CA) string {
		pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"bench.example", "127.0.0.1"}, Secrets: secrets})
		if err != nil {
			b.Fatal(err)
		}
		p := NewProxy(ProxyConfig{Policy: pol, SandboxID: "bench", Resolver: res, CA: ca, UpstreamRoots: upRoots})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.ServeHTTP(l)
		b.Cleanup(func() { p.Close() })
		return l.Addr().String()
	}
	ca, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	caRoots := x509.NewCertPool()
	caRoots.AddCert(ca.Certificate())
	transport := func(addr string, roots *x509.CertPool) *http.Transport {
		return &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr}), DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true}
	}
	ib.plain = transport(proxy(nil, nil), upRoots)
	ib.icpt = transport(proxy([]Secret{{Name: "T", Hosts: []string{"bench.example"}, Value: "bench-secret-0123456789abcdef"}}, ca), caRoots)
	return ib
}

// get fetches path with tr and returns the time to the first byte of
// the response and the body's length.
func (ib *interceptBench) get(b *testing.B, tr *http.Transport, path string, buf []byte) (time.Duration, int64) {
	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://bench.example:%d%s", ib.port, path), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	first := time.Since(t0)
	n, err := drain(resp.Body, buf)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("%s: %d bytes, %v", resp.Status, n, err)
	}
	return first, n
}

// BenchmarkInterceptThroughput downloads 64 MiB over HTTPS through a
// plain CONNECT tunnel and through an intercepting proxy (TLS terminated
// and originated again, the body scanned for the secret's value),
// alternately, and reports both rates and their ratio.
func BenchmarkInterceptThroughput(b *testing.B) {
	const size = 64 << 20
	ib := newInterceptBench(b, size)
	buf := make([]byte, 256<<10)
	var plain, icpt time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, n := ib.get(b, ib.plain, "/blob", buf); n != size {
			b.Fatalf("plain: %d bytes", n)
		}
		t1 := time.Now()
		if _, n := ib.get(b, ib.icpt, "/blob", buf); n != size {
			b.Fatalf("intercepted: %d bytes", n)
		}
		plain += t1.Sub(t0)
		icpt += time.Since(t1)
	}
	mb := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/plain.Seconds(), "connect-MB/s")
	b.ReportMetric(mb/icpt.Seconds(), "intercepted-MB/s")
	b.ReportMetric(plain.Seconds()/icpt.Seconds(), "intercepted/connect")
}

// BenchmarkInterceptFirstByte measures the time from a new HTTPS request
// (new connection, TLS handshake) to the first byte of its response
// through a plain CONNECT tunnel and through the intercepting proxy (two
// handshakes, one with a certificate minted on first use and then
// cached), and reports both medians and the difference.
func BenchmarkInterceptFirstByte(b *testing.B) {
	ib := newInterceptBench(b, 0)
	var plain, icpt []time.Duration
	buf := make([]byte, 4096)
	for b.Loop() {
		d, _ := ib.get(b, ib.plain, "/", buf)
		plain = append(plain, d)
		d, _ = ib.get(b, ib.icpt, "/", buf)
		icpt = append(icpt, d)
	}
	p, i := benchstat.Median(plain), benchstat.Median(icpt)
	b.ReportMetric(float64(p)/1e3, "connect-µs")
	b.ReportMetric(float64(i)/1e3, "intercepted-µs")
	b.ReportMetric(float64(i-p)/1e3, "added-µs")
}
