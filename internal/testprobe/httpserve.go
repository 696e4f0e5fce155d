package main

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
)

// httpServe listens on ADDR and answers every request with what it
// received: the method, the path, "Host: HOST" and each header as
// "Name: value" lines. A websocket upgrade is accepted (the handshake
// of RFC 6455) and the connection then echoes every byte: enough to see
// that an upgraded connection is carried both ways. It prints
// "listening" once the socket is bound.
func httpServe(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			wsEcho(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var lines []string
		for k, vs := range r.Header {
			for _, v := range vs {
				lines = append(lines, k+": "+v)
			}
		}
		sort.Strings(lines)
		fmt.Fprintf(w, "%s %s\nHost: %s\n%s\n\n%s", r.Method, r.URL.RequestURI(), r.Host, strings.Join(lines, "\n"), body)
	}))
}

// wsEcho completes a websocket handshake, then echoes raw bytes.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-Websocket-Key")
	if key == "" {
		http.Error(w, "no Sec-WebSocket-Key", http.StatusBadRequest)
		return
	}
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
	if rw.Flush() != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
