// Command testprobe runs inside sandboxes during tent's integration tests
// and attempts one operation, printing "ok" or the errno's name (for
// example "EPERM") on stdout. It is built statically by the tests and
// mounted read-only into the sandbox; it is not part of tent.
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// probes are testprobe's checks, by the name its first argument gives:
// each takes the arguments after the name (sys.go: processes, files,
// syscalls and resources; net.go: sockets, DNS and HTTP).
var probes = map[string]func(args []string){
	"open":       probeOpen,
	"mkdir":      probeMkdir,
	"ptrace":     probePtrace,
	"kill":       probeKill,
	"tiocsti":    probeTIOCSTI,
	"abstract":   probeAbstract,
	"seqpacket":  probeSeqPacket,
	"tcp":        probeTCP,
	"bind":       probeBind,
	"msgget":     probeMsgget,
	"unshare":    probeUnshare,
	"socket":     probeSocket,
	"socketpair": probeSocketPair,
	"syscall":    probeSyscall,
	"fds":        probeFDs,
	"sid":        probeSid,
	"alloc":      probeAlloc,
	"forkbomb":   probeForkBomb,
	"orphans":    probeOrphans,
	"spin":       probeSpin,
	"fetch":      probeFetch,
	"req":        probeReq,
	"say":        probeSay,
	"direct":     probeDirect,
	"udpconn":    probeUDPConn,
	"parallel":   probeParallel,
	"ttfb":       probeTTFB,
	"download":   probeDownload,
	"socks":      probeSocks,
	"lo":         probeLo,
	"udp":        probeUDP,
	"dns":        probeDNS,
	"httpserve":  probeHTTPServe,
	"nofile":     probeNoFile,
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testprobe CHECK [ARGS]")
		os.Exit(2)
	}
	probe, ok := probes[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown check", os.Args[1])
		os.Exit(2)
	}
	probe(os.Args[2:])
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

// inet4 is the IPv4 socket address of ip (dotted quad) and port.
func inet4(ip, port string) *unix.SockaddrInet4 {
	a := &unix.SockaddrInet4{}
	a.Port, _ = strconv.Atoi(port)
	for i, p := range strings.Split(ip, ".") {
		if i < len(a.Addr) {
			n, _ := strconv.Atoi(p)
			a.Addr[i] = byte(n)
		}
	}
	return a
}
