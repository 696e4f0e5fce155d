package main

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
)

// socksGet connects to host:port through the SOCKS5 proxy in $ALL_PROXY
// (domain-name address type, no authentication), sends an HTTP/1.0 GET
// and returns the status line, or "socks reply N" when the proxy refuses.
func socksGet(host, port string) string {
	u, err := url.Parse(os.Getenv("ALL_PROXY"))
	if err != nil || u.Host == "" {
		return "error: no ALL_PROXY"
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return "error: " + err.Error()
	}
	var greet [2]byte
	if _, err := r.Read(greet[:]); err != nil || greet[1] != 0 {
		return fmt.Sprintf("error: greeting %v %v", greet, err)
	}
	p, _ := strconv.Atoi(port)
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = append(req, byte(p>>8), byte(p))
	if _, err := c.Write(req); err != nil {
		return "error: " + err.Error()
	}
	head := make([]byte, 4)
	if _, err := ioReadFull(r, head); err != nil {
		return "error: " + err.Error()
	}
	if head[1] != 0 {
		return fmt.Sprintf("socks reply %d", head[1])
	}
	skip := map[byte]int{1: 4 + 2, 4: 16 + 2}[head[3]]
	if head[3] == 3 {
		n, _ := r.ReadByte()
		skip = int(n) + 2
	}
	if _, err := ioReadFull(r, make([]byte, skip)); err != nil {
		return "error: " + err.Error()
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", host)
	line, err := r.ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return line[:len(line)-2]
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
