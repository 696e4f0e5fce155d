package netpolicy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// origin is the test's web server, plain or TLS.
type origin struct {
	*httptest.Server
	port    int
	release chan struct{} // /stream waits for it between its two lines
}

func newOrigin(t testing.TB, useTLS bool) *origin {
	t.Helper()
	o := &origin{release: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "len=%d sum=%x", len(body), sha256.Sum256(body))
		case "/stream", "/stream-sized": // the sized one has a Content-Length
			if r.URL.Path == "/stream-sized" {
				w.Header().Set("Content-Length", "13")
			}
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			<-o.release
			w.Write([]byte("second\n"))
		case "/blob": // ?n=BYTES of a fixed pattern, with a Content-Length
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.Write(pattern(n))
		case "/blob-chunked": // the same, chunked: 1 MiB per write, a chunk each
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			for b := pattern(n); len(b) > 0; {
				k := min(len(b), 1<<20)
				w.Write(b[:k])
				b = b[k:]
			}
		default:
			fmt.Fprintf(w, "host=%s path=%s ua=%q proxy-auth=%q hop=%q",
				r.Host, r.URL.Path, r.UserAgent(), r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Hop"))
		}
	})
	if useTLS {
		o.Server = httptest.NewTLSServer(h)
	} else {
		o.Server = httptest.NewServer(h)
	}
	t.Cleanup(o.Close)
	o.port = port(t, o.URL)
	return o
}

// pattern returns n bytes that differ from any shifted copy of themselves.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// tlsConfig trusts o's certificate, which is issued to example.com.
func (o *origin) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(o.Certificate())
	return &tls.Config{RootCAs: pool, ServerName: "example.com"}
}

// tcpServer serves raw TCP connections on loopback with handle, each in
// its own goroutine, and stops them all at cleanup.
func tcpServer(t testing.TB, handle func(*net.TCPConn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return port(t, l.Addr().String())
}

// echo copies its input back and half-closes at EOF.
func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

// countThenReply reads to EOF, then answers with the byte count: it only
// works if the client's half-close reaches it.
func countThenReply(c *net.TCPConn) {
	n, _ := io.Copy(io.Discard, c)
	fmt.Fprintf(c, "got %d", n)
}

// hold reads until the peer goes away.
func hold(c *net.TCPConn) { io.Copy(io.Discard, c) }
