package netpolicy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestSlowlorisHead: a client trickles header lines, one every 50 ms,
// never ending its head. With HeadTimeout at 1 s the proxy answers 408
// and closes the connection: the client reads the reply, then EOF, while
// it is still sending. The cut cannot come before the deadline, and does
// come (a read deadline of a minute bounds the wait).
func TestSlowlorisHead(t *testing.T) {
	const timeout = time.Second
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) { c.HeadTimeout = timeout })
	// Before the dial: the proxy's clock starts once it accepts, which
	// may be before Dial returns here.
	start := time.Now()
	c, err := net.Dial("tcp", h.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
