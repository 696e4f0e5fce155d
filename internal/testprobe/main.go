// Command testprobe runs inside sandboxes during tent's integration tests
// and attempts one operation, printing "ok" or the errno's name (for
// example "EPERM") on stdout. It is built statically by the tests and
// mounted read-only into the sandbox; it is not part of tent.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/rtnl"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testprobe CHECK [ARGS]")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "open": // open PATH FLAGS(r|w|c)
		flags := map[string]int{"r": os.O_RDONLY, "w": os.O_WRONLY, "c": os.O_WRONLY | os.O_CREATE | os.O_TRUNC}[args[1]]
		fd, err := unix.Open(args[0], flags|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		report(err)
	case "mkdir":
		report(unix.Mkdir(args[0], 0o755))
	case "ptrace":
		pid, _ := strconv.Atoi(args[0])
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
		report(errnoErr(e))
	case "kill":
		pid, _ := strconv.Atoi(args[0])
		report(unix.Kill(pid, syscall.Signal(0)))
	case "tiocsti": // tiocsti FD [high]
		fd, _ := strconv.Atoi(args[0])
		req := uintptr(unix.TIOCSTI)
		if len(args) > 1 && args[1] == "high" {
			req |= 0xffffffff00000000
		}
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafePointer(&c)))
		report(errnoErr(e))
	case "abstract": // connect to @NAME
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			report(err)
			return
		}
		report(unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + args[0]}))
	case "seqpacket": // seqpacket PATH MSG: send MSG on a SOCK_SEQPACKET socket, print the reply ("EOF" if none)
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
	case "tcp": // connect to HOST:PORT
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			report(err)
			return
		}
		port, _ := strconv.Atoi(args[1])
		var a [4]byte
		copy(a[:], parseIP4(args[0]))
		report(unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: a}))
	case "msgget": // SysV message queue KEY
		key, _ := strconv.Atoi(args[0])
		_, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), 0, 0)
		report(errnoErr(e))
	case "unshare":
		flags, _ := strconv.ParseUint(args[0], 0, 64)
		report(unix.Unshare(int(flags)))
	case "socket": // FAMILY TYPE
		fam, _ := strconv.Atoi(args[0])
		typ, _ := strconv.Atoi(args[1])
		fd, err := unix.Socket(fam, typ, 0)
		if err == nil {
			unix.Close(fd)
		}
		report(err)
	case "socketpair": // an AF_UNIX stream pair
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		report(err)
	case "syscall": // NR [ARG0]
		nr, _ := strconv.Atoi(args[0])
		var a0 uint64
		if len(args) > 1 {
			a0, _ = strconv.ParseUint(args[1], 0, 64)
		}
		_, _, e := unix.Syscall(uintptr(nr), uintptr(a0), 0, 0)
		report(errnoErr(e))
	case "fds":
		ents, _ := os.ReadDir("/proc/self/fd")
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Println(strings.Join(names, " "))
	case "sid":
		sid, _ := unix.Getsid(0)
		fmt.Println(sid == os.Getpid())
	case "alloc": // alloc MiB: touch every page
		n, _ := strconv.Atoi(args[0])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("ok", len(keep))
	case "forkbomb": // start children until it fails; report the error
		var err error
		for i := 0; i < 10000; i++ {
			c := exec.Command("/bin/sleep", "271")
			if err = c.Start(); err != nil {
				break
			}
		}
		report(err)
	case "orphans": // orphans SECONDS: double-fork and setsid'd sleepers of SECONDS, then sleep
		d := "300"
		if len(args) > 0 {
			d = args[0]
		}
		for i := 0; i < 3; i++ {
			_ = exec.Command("/bin/sh", "-c", "setsid sleep "+d+" & (sleep "+d+" &) ; sleep "+d).Start()
		}
		time.Sleep(300 * time.Second)
	case "spin": // spin MS: busy-loop for MS of wall time, print the CPU ms the loop used (not the start-up's)
		ms, _ := strconv.Atoi(args[0])
		cpu := func() int64 {
			var ru unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &ru)
			return (ru.Utime.Sec+ru.Stime.Sec)*1000 + (ru.Utime.Usec+ru.Stime.Usec)/1000
		}
		before := cpu()
		end := time.Now().Add(time.Duration(ms) * time.Millisecond)
		for time.Now().Before(end) {
		}
		fmt.Println(cpu() - before)
	case "fetch": // fetch URL: GET through the environment's proxy, any certificate; print status, denial header, body
		request([]string{"-k", "GET", args[0]})
	case "req": // req [-k] [-noproxy] [-dump] METHOD URL [NAME=VALUE...]: one request, header values (and with -dump the URL) $-expanded; print status, denial header, body (-dump: the status line, every header field, the body)
		request(args)
	case "say": // say HOST:PORT MSG: connect without a proxy, send MSG and a newline, print the first line of the reply
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
	case "direct": // direct URL: GET with a bare http.Transport (no proxy); print status and body
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
		resp, err := client.Get(args[0])
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	case "udpconn": // udpconn IP PORT: send one datagram on a connected socket and wait for an answer
		c, err := net.Dial("udp", net.JoinHostPort(args[0], args[1]))
		if err != nil {
			report(err)
			return
		}
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 64))
		report(err)
	case "parallel": // parallel N URL: N concurrent GETs through the proxy; "ok N" or the first error
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
	case "ttfb": // ttfb N URL: N requests on fresh connections; median time to the response headers, in µs
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
	case "download": // download URL: GET through the proxy (if any); print MB/s
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
	case "socks": // socks HOST PORT: SOCKS5 CONNECT through $ALL_PROXY, then GET /; print the reply code or status line
		fmt.Println(socksGet(args[0], args[1]))
	case "lo": // lo: whether lo is up and its GSO limits
		l, err := rtnl.GetLink(rtnl.LoopbackIndex)
		if err != nil {
			report(err)
			return
		}
		fmt.Printf("up=%v gso=%d gso4=%d\n", l.Up, l.GSOMaxSize, l.GSOIPv4MaxSize)
	case "udp": // udp IP PORT: send one datagram
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			report(err)
			return
		}
		port, _ := strconv.Atoi(args[1])
		var a [4]byte
		copy(a[:], parseIP4(args[0]))
		report(unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: port, Addr: a}))
	case "dns": // dns NAME: resolve with the system's resolver configuration
		_, err := net.DefaultResolver.LookupHost(context.Background(), args[0])
		if err != nil {
			fmt.Println("error")
			return
		}
		fmt.Println("ok")
	case "httpserve": // httpserve ADDR: an HTTP server that echoes requests (see httpServe)
		httpServe(args[0])
	case "nofile":
		var err error
		for i := 0; i < 100000; i++ {
			if _, err = unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
				break
			}
		}
		report(err)
	default:
		fmt.Fprintln(os.Stderr, "unknown check", os.Args[1])
		os.Exit(2)
	}
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func report(err error) {
	if err == nil {
		fmt.Println("ok")
		return
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		fmt.Println(unix.ErrnoName(errno))
		return
	}
	fmt.Println("error:", err)
}

func parseIP4(s string) []byte {
	var out []byte
	for _, p := range strings.Split(s, ".") {
		n, _ := strconv.Atoi(p)
		out = append(out, byte(n))
	}
	return out
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
