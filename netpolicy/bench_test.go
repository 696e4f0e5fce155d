package netpolicy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/benchstat"
)

// benchProxy serves a real proxy (default dialer and resolver) on loopback
// allowing 127.0.0.1 and returns the HTTP proxy's address.
func benchProxy(b *testing.B) string {
	b.Helper()
	p := NewProxy(ProxyConfig{Policy: mustCompile(b, []string{"127.0.0.1"}, nil), SandboxID: "bench"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.ServeHTTP(l)
	b.Cleanup(func() { p.Close() })
	return l.Addr().String()
}

// dialTunnel opens a CONNECT tunnel to target through the proxy at proxy
// and returns a reader positioned after the proxy's 200 response.
func dialTunnel(proxy, target string) (net.Conn, io.Reader, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		c.Close()
		return nil, nil, err
	}
	const ok = "HTTP/1.1 200 Connection established\r\n\r\n"
	br := bufio.NewReaderSize(c, 64<<10)
	got := make([]byte, len(ok))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != ok {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s: %q %v", target, got, err)
	}
	return c, br, nil
}

func drain(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// BenchmarkConnectThroughput downloads 128 MiB from a loopback server
// directly and through a CONNECT tunnel, alternately, and reports both
// rates and their ratio (target: proxy/direct >= 0.8).
func BenchmarkConnectThroughput(b *testing.B) {
	const size = 128 << 20
	chunk := make([]byte, 1<<20)
	srv := tcpServer(b, func(c *net.TCPConn) {
		for range size / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	target := fmt.Sprintf("127.0.0.1:%d", srv)
	proxy := benchProxy(b)
	buf := make([]byte, 256<<10)
	var direct, tunnelled time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := drain(c, buf); err != nil || n != size {
			b.Fatalf("direct: %d bytes, %v", n, err)
		}
		c.Close()
		t1 := time.Now()
		c, r, err := dialTunnel(proxy, target)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := drain(r, buf); err != nil || n != size {
			b.Fatalf("proxy: %d bytes, %v", n, err)
		}
		c.Close()
		direct += t1.Sub(t0)
		tunnelled += time.Since(t1)
	}
	mb := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/tunnelled.Seconds(), "proxy-MB/s")
	b.ReportMetric(direct.Seconds()/tunnelled.Seconds(), "proxy/direct")
}

// BenchmarkConnectLatency measures the time to the first byte of a new
// connection to a loopback server that speaks first, directly and through
// a CONNECT tunnel, and reports both medians and the difference (target:
// at most 1 ms added).
func BenchmarkConnectLatency(b *testing.B) {
	srv := tcpServer(b, func(c *net.TCPConn) {
		c.Write([]byte{'x'})
		io.Copy(io.Discard, c)
	})
	target := fmt.Sprintf("127.0.0.1:%d", srv)
	proxy := benchProxy(b)
	var direct, tunnelled []time.Duration
	one := make([]byte, 1)
	for b.Loop() {
		t0 := time.Now()
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		c.Close()
		t0 = time.Now()
		c, r, err := dialTunnel(proxy, target)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, one); err != nil {
			b.Fatal(err)
		}
		tunnelled = append(tunnelled, time.Since(t0))
		c.Close()
	}
	d, p := benchstat.Median(direct), benchstat.Median(tunnelled)
	b.ReportMetric(float64(d)/1e3, "direct-µs")
	b.ReportMetric(float64(p)/1e3, "proxy-µs")
	b.ReportMetric(float64(p-d)/1e3, "added-µs")
}
