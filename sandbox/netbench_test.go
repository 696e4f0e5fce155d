//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// probeRates runs the probe with args in a limited sandbox and on the host
// (hostArgs), and returns both numbers it prints.
func probeRates(b *testing.B, args, hostArgs []string) (inside, host float64) {
	b.Helper()
	return insideRate(b, limited(), args), hostRate(b, hostArgs)
}

// noProxy unsets the proxy variables, for programs that ignore them.
var noProxy = []string{"HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=", "ALL_PROXY=", "all_proxy="}

// insideRate runs the probe with args in a sandbox of spec and returns
// the number it prints.
func insideRate(b *testing.B, spec sandbox.Spec, args []string) float64 {
	b.Helper()
	dir, err := probeDir()
	if err != nil {
		b.Fatal(err)
	}
	spec.Mounts = []sandbox.Mount{{Source: dir, Target: probeTarget, Access: sandbox.ReadOnly}}
	cmd := sandbox.Command(context.Background(), spec, probeTarget+"/testprobe", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Resolver = &out, &fakeResolver{}
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if err != nil {
		b.Fatalf("in the sandbox: %q", out.String())
	}
	return v
}

// hostRate runs the probe with args on the host and returns the number
// it prints.
func hostRate(b *testing.B, args []string) float64 {
	b.Helper()
	dir, err := probeDir()
	if err != nil {
		b.Fatal(err)
	}
	o, err := exec.Command(filepath.Join(dir, "testprobe"), args...).Output()
	if err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(o)), 64)
	if err != nil {
		b.Fatalf("on the host: %q", o)
	}
	return v
}

// BenchmarkLimitedDownload downloads 256 MiB over TLS from a host server,
// from inside a limited sandbox (through the CONNECT tunnel of tent's
// proxy) and directly on the host's loopback, and reports both rates and
// their ratio (target >= 0.8).
func BenchmarkLimitedDownload(b *testing.B) { benchDownload(b, httptest.NewTLSServer, "https", 0) }

// BenchmarkLimitedPlainDownload is the same over plain HTTP, which the
// proxy forwards request by request instead of tunnelling.
func BenchmarkLimitedPlainDownload(b *testing.B) { benchDownload(b, httptest.NewServer, "http", 0) }

// BenchmarkLimitedChunkedDownload is the plain-HTTP download with a
// chunked body, which the server writes 1 MiB at a time (a chunk each).
func BenchmarkLimitedChunkedDownload(b *testing.B) {
	benchDownload(b, httptest.NewServer, "http", 1<<20)
}

// benchDownload serves 256 MiB with a Content-Length, or chunked in
// chunks of the given size.
func benchDownload(b *testing.B, newServer func(http.Handler) *httptest.Server, scheme string, chunk int) {
	blob := make([]byte, 256<<20)
	_, _ = rand.Read(blob)
	srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if chunk == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
			_, _ = w.Write(blob)
			return
		}
		for rest := blob; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
			if _, err := w.Write(rest[:min(chunk, len(rest))]); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var viaProxy, direct float64
	for b.Loop() {
		in, host := probeRates(b, []string{"download", scheme + "://allowed.test:" + port + "/"}, []string{"download", srv.URL})
		viaProxy += in
		direct += host
	}
	b.ReportMetric(viaProxy/float64(b.N), "sandbox-MB/s")
	b.ReportMetric(direct/float64(b.N), "direct-MB/s")
	b.ReportMetric(viaProxy/direct, "ratio")
}

// BenchmarkLimitedFirstByte compares the median time to the response
// headers of 50 requests on fresh connections, from inside a limited
// sandbox through the proxy and directly on the host (target: at most
// 1 ms added).
func BenchmarkLimitedFirstByte(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var in, host float64
	for b.Loop() {
		i, h := probeRates(b, []string{"ttfb", "50", "http://allowed.test:" + port + "/"}, []string{"ttfb", "50", srv.URL})
		in += i
		host += h
	}
	b.ReportMetric(in/float64(b.N), "sandbox-µs")
	b.ReportMetric(host/float64(b.N), "direct-µs")
	b.ReportMetric((in-host)/float64(b.N), "added-µs")
}

// transparentBench returns a spec for a transparent client of a host
// server on port: the proxy variables unset, allowed.test and 127.0.0.1
// allowed on that port only (so that it is caught).
func transparentBench(port string) sandbox.Spec {
	spec := transparentSpec(port)
	spec.Env = noProxy
	return spec
}

// BenchmarkTransparentDownload downloads 256 MiB over TLS from a host
// server three ways: from a limited sandbox by a program that ignores the
// proxy variables (caught transparently), from one through the proxy
// (CONNECT), and directly on the host; it reports the three rates and the
// transparent path's ratio to the direct one.
func BenchmarkTransparentDownload(b *testing.B) {
	blob := make([]byte, 256<<20)
	_, _ = rand.Read(blob)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
		_, _ = w.Write(blob)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "https://allowed.test:" + port + "/"
	var transparent, proxied, direct float64
	for b.Loop() {
		transparent += insideRate(b, transparentBench(port), []string{"download", url})
		proxied += insideRate(b, limited(), []string{"download", url})
		direct += hostRate(b, []string{"download", srv.URL})
	}
	n := float64(b.N)
	b.ReportMetric(transparent/n, "transparent-MB/s")
	b.ReportMetric(proxied/n, "proxy-MB/s")
	b.ReportMetric(direct/n, "direct-MB/s")
	b.ReportMetric(transparent/direct, "ratio")
}

// BenchmarkTransparentFirstByte compares the median time to the response
// headers of 50 requests on fresh connections (each name resolved by the
// stub DNS too, for the transparent client) from a limited sandbox, caught
// transparently and through the proxy, with the same on the host.
func BenchmarkTransparentFirstByte(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	url := "http://allowed.test:" + port + "/"
	var transparent, proxied, direct float64
	for b.Loop() {
		transparent += insideRate(b, transparentBench(port), []string{"ttfb", "50", url})
		proxied += insideRate(b, limited(), []string{"ttfb", "50", url})
		direct += hostRate(b, []string{"ttfb", "50", srv.URL})
	}
	n := float64(b.N)
	b.ReportMetric(transparent/n, "transparent-µs")
	b.ReportMetric(proxied/n, "proxy-µs")
	b.ReportMetric(direct/n, "direct-µs")
}
