package netpolicy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rss returns the process's resident set size in bytes.
func rss(b *testing.B) int64 {
	s, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(s))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// serveBench serves p's HTTP proxy on loopback until the benchmark ends and
// returns its address.
func serveBench(b *testing.B, p *Proxy) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.ServeHTTP(l)
	return l.Addr().String()
}

// BenchmarkProxySlowHeadersMemory opens 1000 connections to a proxy, each
// sending 60 KiB of a header line it does not finish (as much as
// MaxHeaderBytes lets it hold), waits until the proxy has read all it
// accepts, and reports the growth of the heap (heap-B, after a garbage
// collection) and of the process's RSS (rss-B, which also holds the
// client ends and the goroutine stacks), and the heap per connection the
// proxy serves (heap-B/conn). With the default MaxConns the proxy serves
// 256 and refuses the rest with 503; with MaxConns 1000 it serves all.
// The bound, checked by TestSlowHeadersAttack: the heap grows by at most
// MaxConns × (2 × MaxHeaderBytes + 16 KiB), 36 MiB by default (on main,
// with no limit, 1000 such connections cost over 1 GiB).
func BenchmarkProxySlowHeadersMemory(b *testing.B) {
	for _, maxConns := range []int{DefaultMaxConns, 1000} {
		b.Run(fmt.Sprintf("MaxConns=%d", maxConns), func(b *testing.B) {
			const n = 1000
			head := append([]byte("GET http://a.test/ HTTP/1.1\r\nX-Pad: "), bytes.Repeat([]byte{'a'}, 60<<10)...)
			var heap, mem int64
			for b.Loop() {
				p := NewProxy(ProxyConfig{Policy: mustCompile(b, nil, nil), MaxConns: maxConns, HeadTimeout: 10 * time.Minute})
				addr := serveBench(b, p)
				debug.FreeOSMemory()
				h0, r0 := int64(heapInUse()), rss(b)
				conns := make([]net.Conn, 0, n)
				for range n {
					c, err := net.DialTimeout("tcp", addr, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					c.SetWriteDeadline(time.Now().Add(time.Minute))
					c.Write(head)
					conns = append(conns, c)
				}
				served := min(n, maxConns)
				waitFor(b, "the connections served", func() bool {
					return p.count.refusedConns.Load() == int64(n-served) && p.Active() == served
				})
				waitFor(b, "the heads read", func() bool {
					for _, c := range p.clientConns() {
						if unread(c) != 0 {
							return false
						}
					}
					return true
				})
				heap += int64(heapInUse()) - h0
				mem += rss(b) - r0
				for _, c := range conns {
					c.Close()
				}
				p.Close()
			}
			b.ReportMetric(float64(heap)/float64(b.N), "heap-B")
			b.ReportMetric(float64(heap)/float64(b.N)/float64(min(n, maxConns)), "heap-B/conn")
			b.ReportMetric(float64(mem)/float64(b.N), "rss-B")
		})
	}
}

// byteCounter counts the bytes written to it.
type byteCounter struct{ n atomic.Int64 }

func (c *byteCounter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return len(b), nil
}

// BenchmarkDenialsMemory sends 10,000 CONNECT requests for distinct 16 KiB
// host names (4 kept-alive connections, 2,500 each) to a proxy with
// default limits, all refused, and reports what the proxy keeps: the
// growth of the heap after a garbage collection (heap-B), the audit bytes
// written (audit-B), the entries of the denial table (entries) and the
// length of its Summary (summary-B). Bounds: at most DefaultMaxDenials
// destinations plus one entry per reason (266), each host cut to 253
// bytes, so the table stays under 100 KiB; Summary at most MaxSummaryLen
// (2 KiB); audit records of at most a few hundred bytes, within
// AuditBytes (64 MiB) in all. On main the table and the log kept every
// name whole: 160 MiB each for this run.
func BenchmarkDenialsMemory(b *testing.B) {
	const n, conns, nameLen = 10_000, 4, 16 << 10
	tail := strings.Repeat("x", nameLen)
	var heap, audit, entries, summary int64
	for b.Loop() {
		var log byteCounter
		p := NewProxy(ProxyConfig{Policy: mustCompile(b, nil, nil), Audit: &log})
		addr := serveBench(b, p)
		debug.FreeOSMemory()
		h0 := int64(heapInUse())
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		for k := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for i := k; i < n; i += conns {
					fmt.Fprintf(c, "CONNECT n%05d%s:443 HTTP/1.1\r\n\r\n", i, tail)
					resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
					if err != nil {
						errs <- err
						return
					}
					io.Copy(io.Discard, resp.Body)
					if resp.StatusCode != http.StatusForbidden {
						errs <- fmt.Errorf("request %d: %s", i, resp.Status)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		heap += int64(heapInUse()) - h0
		d := p.Denied()
		entries += int64(len(d))
		summary += int64(len(Summary(d)))
		p.Close()
		audit += log.n.Load()
	}
	f := float64(b.N)
	b.ReportMetric(float64(heap)/f, "heap-B")
	b.ReportMetric(float64(audit)/f, "audit-B")
	b.ReportMetric(float64(entries)/f, "entries")
	b.ReportMetric(float64(summary)/f, "summary-B")
}
