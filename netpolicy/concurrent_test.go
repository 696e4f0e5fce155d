package netpolicy

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestConcurrentTunnels: 200 tunnels at once through one proxy, each
// carrying 64 KiB both ways, all intact.
func TestConcurrentTunnels(t *testing.T) {
	p := tcpServer(t, echo)
	h := newHarness(t, []string{"127.0.0.1"}, nil)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tunnelEcho(h, i, p)
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d tunnels failed", failed, n)
	}
	if d := h.proxy.Denied(); len(d) != 0 {
		t.Errorf("denials: %v", d)
	}
}

func tunnelEcho(h *harness, i, p int) error {
	c, err := net.DialTimeout("tcp", h.httpAddr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", p)
	br := bufioReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("tunnel %d: %w", i, err)
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("tunnel %d: %s", i, resp.Status)
	}
	payload := make([]byte, 64<<10)
	rand.Read(payload)
	go func() {
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil {
		return fmt.Errorf("tunnel %d: %w", i, err)
	}
	if !bytes.Equal(got, payload) {
		return fmt.Errorf("tunnel %d: %d bytes back, corrupted or short", i, len(got))
	}
	return nil
}
