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
	return sandbox.Spec{Network: sandbox.NetworkPolicy{
		Mode:         netpolicy.Limited,
		AllowedHosts: []string{"allowed.test:" + port, "*.allowed.test:" + port, "127.0.0.1:" + port},
		DeniedHosts:  []string{"blocked.allowed.test"},
	}}
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
