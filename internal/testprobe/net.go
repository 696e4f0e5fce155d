package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/rtnl"
)

// probeAbstract is "abstract NAME": connect to the abstract socket @NAME.
func probeAbstract(args []string) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		report(err)
		return
	}
	report(unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + args[0]}))
}

// probeSeqPacket is "seqpacket PATH MSG": send MSG on a SOCK_SEQPACKET
// socket, print the reply ("EOF" if none).
func probeSeqPacket(args []string) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		report(err)
		return
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: args[0]}); err != nil {
		report(err)
		return
	}
	// A peer that answers before reading may have closed already
	// (EPIPE): its answer is still there to read.
	_, _ = unix.Write(fd, []byte(args[1]))
	buf := make([]byte, 1<<16)
	n, err := unix.Read(fd, buf)
	switch {
	case err != nil:
		report(err)
	case n == 0:
		fmt.Println("EOF")
	default:
		fmt.Println(string(buf[:n]))
	}
}

// probeTCP is "tcp IP PORT": connect to IP:PORT.
func probeTCP(args []string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		report(err)
		return
	}
	report(unix.Connect(fd, inet4(args[0], args[1])))
}

// probeBind is "bind ADDR PORT": bind a TCP socket; print ok or the errno.
func probeBind(args []string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		report(err)
		return
	}
	report(unix.Bind(fd, inet4(args[0], args[1])))
}

// probeFetch is "fetch URL": GET through the environment's proxy, any
// certificate; print status, denial header, body.
func probeFetch(args []string) {
	request([]string{"-k", "GET", args[0]})
}

// probeReq is "req [-k] [-noproxy] [-dump] METHOD URL [NAME=VALUE...]": one
// request, header values (and with -dump the URL) $-expanded; print status,
// denial header, body (-dump: the status line, every header field, the
// body).
func probeReq(args []string) {
	request(args)
}

// probeSay is "say HOST:PORT MSG": connect without a proxy, send MSG and
// a newline, print the first line of the reply.
func probeSay(args []string) {
	c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()
	fmt.Fprintf(c, "%s\r\n", args[1])
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(strings.TrimSpace(line))
}

// probeDirect is "direct URL": GET with a bare http.Transport (no proxy);
// print status and body.
func probeDirect(args []string) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	resp, err := client.Get(args[0])
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
}

// probeUDPConn is "udpconn IP PORT": send one datagram on a connected
// socket and wait for an answer.
func probeUDPConn(args []string) {
	c, err := net.Dial("udp", net.JoinHostPort(args[0], args[1]))
	if err != nil {
		report(err)
		return
	}
	c.Write([]byte("x"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 64))
	report(err)
}

// probeParallel is "parallel N URL": N concurrent GETs through the proxy;
// "ok N" or the first error.
func probeParallel(args []string) {
	n, _ := strconv.Atoi(args[0])
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, MaxConnsPerHost: 0, MaxIdleConnsPerHost: n,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			resp, err := client.Get(args[1])
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	ok := 0
	var first error
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		} else if err == nil {
			ok++
		}
	}
	if first != nil {
		fmt.Println("error:", first)
		return
	}
	fmt.Println("ok", ok)
}

// probeTTFB is "ttfb N URL": N requests on fresh connections; median time
// to the response headers, in µs.
func probeTTFB(args []string) {
	n, _ := strconv.Atoi(args[0])
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}}
	var d []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		resp, err := client.Get(args[1])
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		d = append(d, time.Since(start))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	fmt.Println(d[len(d)/2].Microseconds())
}

// probeDownload is "download URL": GET through the proxy (if any); print
// MB/s.
func probeDownload(args []string) {
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	start := time.Now()
	resp, err := client.Get(args[0])
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("%.1f\n", float64(n)/time.Since(start).Seconds()/1e6)
}

// probeSocks is "socks HOST PORT": SOCKS5 CONNECT through $ALL_PROXY, then
// GET /; print the reply code or status line.
func probeSocks(args []string) {
	fmt.Println(socksGet(args[0], args[1]))
}

// probeLo is "lo": whether lo is up and its GSO limits.
func probeLo(args []string) {
	l, err := rtnl.GetLink(rtnl.LoopbackIndex)
	if err != nil {
		report(err)
		return
	}
	fmt.Printf("up=%v gso=%d gso4=%d\n", l.Up, l.GSOMaxSize, l.GSOIPv4MaxSize)
}

// probeUDP is "udp IP PORT": send one datagram.
func probeUDP(args []string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		report(err)
		return
	}
	report(unix.Sendto(fd, []byte("x"), 0, inet4(args[0], args[1])))
}

// probeDNS is "dns NAME": resolve with the system's resolver configuration.
func probeDNS(args []string) {
	_, err := net.DefaultResolver.LookupHost(context.Background(), args[0])
	if err != nil {
		fmt.Println("error")
		return
	}
	fmt.Println("ok")
}

// probeHTTPServe is "httpserve ADDR": an HTTP server that echoes requests
// (see httpServe).
func probeHTTPServe(args []string) {
	httpServe(args[0])
}

// request makes one HTTP request as a program in the sandbox would: through
// the environment's proxy (unless -noproxy: then a program that ignores
// it, caught transparently), verifying TLS against the system roots (which
// Go reads from SSL_CERT_FILE, as OpenSSL does) unless -k. Header values
// are expanded from the environment, so "Authorization=Bearer $TOKEN"
// sends the variable's value.
func request(args []string) {
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
	dump := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-dump":
			dump = true
			if len(args) > 2 {
				args[2] = os.ExpandEnv(args[2]) // the URL, after the flag and METHOD
			}
		case "-k":
			tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // a host the proxy does not intercept: the tests' own server
		case "-noproxy":
			tr.Proxy = nil
		}
		args = args[1:]
	}
	req, err := http.NewRequest(args[0], args[1], nil)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, h := range args[2:] {
		k, v, _ := strings.Cut(h, "=")
		req.Header.Set(k, os.ExpandEnv(v))
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if dump {
		fmt.Printf("status %s\n", resp.Status)
		resp.Header.Write(os.Stdout)
		resp.Trailer.Write(os.Stdout)
		fmt.Printf("\n%s\n", body)
		return
	}
	fmt.Printf("%d %s %s\n", resp.StatusCode, resp.Header.Get("X-Tent-Denied"), strings.TrimSpace(string(body)))
}
