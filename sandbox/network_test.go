//go:build linux

package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/hostcheck"
	"github.com/tent-sandbox/tent/internal/rtnl"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// fakeResolver maps every name to 127.0.0.1 and remembers what it was
// asked.
type fakeResolver struct {
	mu    sync.Mutex
	asked []string
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func (r *fakeResolver) wasAsked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.asked {
		if h == host {
			return true
		}
	}
	return false
}

// hostServers starts a plain and a TLS HTTP server on the host's loopback.
func hostServers(t *testing.T) (plainPort, tlsPort string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") })
	plain, tlsSrv := httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(plain.Close)
	t.Cleanup(tlsSrv.Close)
	_, plainPort, _ = net.SplitHostPort(plain.Listener.Addr().String())
	_, tlsPort, _ = net.SplitHostPort(tlsSrv.Listener.Addr().String())
	return plainPort, tlsPort
}

// limited is a spec allowing allowed.test (the host's servers, so the
// loopback address must be allowed literally too) and denying
// blocked.allowed.test.
func limited() sandbox.Spec {
	return sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{
				Mode:         netpolicy.Limited,
				AllowedHosts: []string{"allowed.test", "*.allowed.test", "127.0.0.1"},
				DeniedHosts:  []string{"blocked.allowed.test"},
			},
		},
	}
}

// runNet runs the probe with a fake resolver and an audit log.
func runNet(t *testing.T, spec sandbox.Spec, res *fakeResolver, audit io.Writer, args ...string) (string, *sandbox.Report) {
	t.Helper()
	cmd := sandbox.Command(context.Background(), withProbe(t, spec), probeTarget+"/testprobe", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Resolver, cmd.NetLog = &out, res, audit
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return strings.TrimSpace(out.String()), cmd.Report
}

func TestLimitedNetworkAllowsOnlyListedHosts(t *testing.T) {
	plain, tlsPort := hostServers(t)
	res := &fakeResolver{}
	var audit bytes.Buffer
	spec := limited()

	out, _ := runNet(t, spec, res, &audit, "fetch", "http://allowed.test:"+plain+"/")
	expect(t, "HTTP through the proxy", out, "200  hello from the host")
	out, _ = runNet(t, spec, res, &audit, "fetch", "https://api.allowed.test:"+tlsPort+"/")
	expect(t, "HTTPS through CONNECT", out, "200  hello from the host")
	out, _ = runNet(t, spec, res, &audit, "socks", "allowed.test", plain)
	expect(t, "SOCKS5", out, "HTTP/1.0 200 OK")

	out, rep := runNet(t, spec, res, &audit, "fetch", "http://evil.test:"+plain+"/")
	if !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "not allowed") {
		t.Errorf("a name not allowed: %q, want 403 naming the reason", out)
	}
	if len(rep.NetworkDenied) != 1 || rep.NetworkDenied[0].Host != "evil.test" {
		t.Errorf("report of denials: %+v", rep.NetworkDenied)
	}
	out, _ = runNet(t, spec, res, &audit, "fetch", "http://blocked.allowed.test:"+plain+"/")
	if !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "rule=blocked.allowed.test") {
		t.Errorf("deny must win over a wildcard allow: %q", out)
	}
	out, _ = runNet(t, spec, res, &audit, "socks", "evil.test", plain)
	expect(t, "SOCKS5 to a name not allowed", out, "socks reply 2")
	// Look-alikes of the wildcard never match.
	for _, host := range []string{"evilallowed.test", "allowed.test.evil"} {
		out, _ = runNet(t, spec, res, &audit, "fetch", "http://"+host+":"+plain+"/")
		if !strings.HasPrefix(out, "403 ") {
			t.Errorf("%s: %q, want 403", host, out)
		}
	}
	for _, host := range []string{"evil.test", "blocked.allowed.test", "evilallowed.test"} {
		if res.wasAsked(host) {
			t.Errorf("the proxy resolved %s, which the policy denies", host)
		}
	}
	// Every decision is in the audit log, as JSON lines.
	var allow, deny int
	sc := bufio.NewScanner(&audit)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		switch rec["verdict"] {
		case "allow":
			allow++
		case "deny":
			deny++
		}
	}
	if allow < 3 || deny < 5 {
		t.Errorf("audit log: %d allow and %d deny records, want at least 3 and 5", allow, deny)
	}
}

func TestLimitedNetworkGuardsPrivateAddresses(t *testing.T) {
	plain, _ := hostServers(t)
	// allowed.test resolves to 127.0.0.1, which no rule names literally.
	spec := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"allowed.test"}}}}
	out, _ := runNet(t, spec, &fakeResolver{}, nil, "fetch", "http://allowed.test:"+plain+"/")
	if !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "private") {
		t.Errorf("a name resolving to loopback: %q, want 403 private address", out)
	}
}

// TestLimitedNetworkHasNoDirectRoute: every address is the sandbox's own
// (transparent catching): a port no rule names is refused at once, UDP
// but DNS too, and a name no rule allows does not resolve.
func TestLimitedNetworkHasNoDirectRoute(t *testing.T) {
	spec := limited()
	expect(t, "direct TCP", probe(t, spec, "tcp", "192.0.2.1", "9"), "ECONNREFUSED")
	expect(t, "direct UDP", probe(t, spec, "udpconn", "192.0.2.1", "54"), "ECONNREFUSED")
	expect(t, "DNS", probe(t, spec, "dns", "example.com"), "error")
	env := mustRun(t, spec, "env")
	for _, want := range []string{"HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:1080", "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %s", want)
		}
	}
}

// TestLoopbackSegments: a sandbox with its own network namespace gets a
// loopback that is up and carries large segments (namespaces.LoopbackGSO,
// where the kernel supports it); a host-network sandbox leaves the host's
// loopback as it is.
func TestLoopbackSegments(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	gso, gso4 := 65536, 0
	if hostcheck.ReleaseAtLeast(release, 5, 19) {
		gso = namespaces.LoopbackGSO
	}
	if hostcheck.ReleaseAtLeast(release, 6, 3) {
		gso4 = namespaces.LoopbackGSO
	}
	want := fmt.Sprintf("up=true gso=%d gso4=%d", gso, gso4)
	expect(t, "lo, network none", probe(t, sandbox.Spec{}, "lo"), want)
	expect(t, "lo, network limited", probe(t, limited(), "lo"), want)

	host, err := rtnl.GetLink(rtnl.LoopbackIndex)
	if err != nil {
		t.Fatal(err)
	}
	hostNet := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}
	expect(t, "lo, network host", probe(t, hostNet, "lo"), fmt.Sprintf("up=%v gso=%d gso4=%d", host.Up, host.GSOMaxSize, host.GSOIPv4MaxSize))
}

func TestProxyIsUnreachableFromTheHost(t *testing.T) {
	cmd := sandbox.Command(context.Background(), limited(), "sleep", "2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// The listeners live in the sandbox's network namespace: nothing
	// listens on the host for tent.
	for _, port := range []string{"3128", "1080"} {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			t.Errorf("something on the host accepts connections on %s", port)
		}
	}
	tcp, _ := os.ReadFile("/proc/net/tcp")
	for _, hexPort := range []string{":0C38 ", ":0438 "} {
		if strings.Contains(string(tcp), hexPort) {
			t.Errorf("a host socket uses port %s", hexPort)
		}
	}
	_ = cmd.Signal(9)
}

func TestNetworkPolicyChangesAtRuntime(t *testing.T) {
	plain, _ := hostServers(t)
	url := "http://allowed.test:" + plain + "/"
	script := fmt.Sprintf("read a; %[1]s fetch %[2]s; read b; %[1]s fetch %[2]s", probeTarget+"/testprobe", url)
	cmd := sandbox.Command(context.Background(), withProbe(t, limited()), "sh", "-c", script)
	pr, pw := io.Pipe()
	cmd.Resolver = &fakeResolver{}
	stdinR, stdinW := io.Pipe()
	cmd.Stdin, cmd.Stdout = stdinR, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(pr)
	fmt.Fprintln(stdinW)
	lines.Scan()
	expect(t, "before the change", lines.Text(), "200  hello from the host")
	if err := cmd.SetNetworkPolicy(context.Background(), sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"other.test"}}); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdinW)
	lines.Scan()
	if got := lines.Text(); !strings.HasPrefix(got, "403 ") {
		t.Errorf("after the change: %q, want 403", got)
	}
	if err := cmd.SetNetworkPolicy(context.Background(), sandbox.NetworkPolicy{Mode: netpolicy.Host}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("switching a running sandbox to host: %v, want ErrUnsupported", err)
	}
	stdinW.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
}

func TestTwoHundredConcurrentTunnels(t *testing.T) {
	_, tlsPort := hostServers(t)
	out, _ := runNet(t, limited(), &fakeResolver{}, nil, "parallel", "200", "https://allowed.test:"+tlsPort+"/")
	expect(t, "200 concurrent CONNECT tunnels from one sandbox", out, "ok 200")
}
