package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

func TestParsePublish(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want sandbox.PortMapping
		err  string
	}{
		{in: "8080:80", want: sandbox.PortMapping{HostPort: 8080, Port: 80}},
		{in: "80", want: sandbox.PortMapping{Port: 80}},
		{in: "80/tcp", want: sandbox.PortMapping{Port: 80}},
		{in: "0.0.0.0:8080:80", want: sandbox.PortMapping{HostIP: "0.0.0.0", HostPort: 8080, Port: 80}},
		{in: "127.0.0.1::80", want: sandbox.PortMapping{HostIP: "127.0.0.1", Port: 80}},
		{in: "[::1]:8080:80", want: sandbox.PortMapping{HostIP: "::1", HostPort: 8080, Port: 80}},
		{in: "8080:80/udp", err: "only TCP"},
		{in: "localhost:8080:80", err: "not an IP address"},
		{in: "8080:0", err: "not a port"},
		{in: "70000:80", err: "not a port"},
		{in: "1:2:3:4", err: "want [HOSTIP:]HOSTPORT:PORT"},
		{in: "[::1]:80", err: "want [HOSTIP:]HOSTPORT:PORT"},
		{in: "8080:+80", err: "not a port"},
		{in: "", err: "not a port"},
	} {
		got, err := parsePublish(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parsePublish(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("parsePublish(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestPublishedPort: tent create -p publishes a port, tent port lists it,
// python's http.server inside answers through it, tent rm removes it.
func TestPublishedPort(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (scripts/setup installs it)")
	}
	l := newLife(t)
	id := l.create(t, "-p", "127.0.0.1::8000")
	r := l.tent(t, "port", id)
	r.expect(t, 0)
	line := strings.TrimSpace(r.stdout)
	hostAddr, ok := strings.CutPrefix(line, "8000/tcp -> ")
	if !ok || !strings.HasPrefix(hostAddr, "127.0.0.1:") {
		t.Fatalf("tent port: %q", r.stdout)
	}
	r = l.tent(t, "port", id, "-o", "json")
	var ms []sandbox.PortMapping
	if err := json.Unmarshal([]byte(r.stdout), &ms); err != nil || len(ms) != 1 || fmt.Sprintf("127.0.0.1:%d", ms[0].HostPort) != hostAddr {
		t.Errorf("tent port -o json: %q (%v)", r.stdout, err)
	}
	l.tent(t, "port", id, "9999").expect(t, exitRefused, "publishes no port 9999")
	l.tent(t, "exec", id, "--", "sh", "-c", "echo from-inside > /tmp/f; setsid python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp </dev/null >/dev/null 2>&1 &").expect(t, 0)
	if body := getUntilOK(t, "http://"+hostAddr+"/f"); body != "from-inside\n" {
		t.Errorf("through the published port: %q", body)
	}
	l.tent(t, "rm", id).expect(t, 0)
	if c, err := net.Dial("tcp", hostAddr); err == nil {
		c.Close()
		t.Errorf("%s still listens after tent rm", hostAddr)
	}
	tent(t, "run", "-p", "80", "--", "true").expect(t, exitRefused, "unknown shorthand flag: 'p'")
}

// TestTransparentCurl: tent run --allow-host, with curl told to ignore
// the proxy, reaches the allowed address and port, and a denied name
// fails at once with curl's own error and tent's summary.
func TestTransparentCurl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (scripts/setup installs it)")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "host says hi") }))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	r := tent(t, "run", "--allow-host", addr, "--", "curl", "-sS", "--noproxy", "*", srv.URL+"/")
	r.expect(t, 0)
	if r.stdout != "host says hi" {
		t.Errorf("allowed: stdout %q", r.stdout)
	}
	r = tent(t, "run", "--allow-host", addr, "--", "curl", "-sS", "--noproxy", "*", "http://denied.example/")
	r.expect(t, 6, "curl: (6) Could not resolve host: denied.example", "tent: blocked ", "denied.example (not allowed")
}

// An idle sandbox's supervisor hands its published ports and the stub
// DNS's answers on: a connection to the published port wakes it, and an
// address a program inside resolved before the hand-off still stands for
// its name after it.
func TestIdleSandboxKeepsPortsAndNames(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"python3", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/setup installs it)", tool)
		}
	}
	l := newLife(t)
	netLog := t.TempDir() + "/net.jsonl"
	id := l.create(t, "--idle-after", "200ms", "-p", "127.0.0.1::8000", "--allow-host", "names.example:443", "--net-log", netLog)
	sup, initPID := supervisorAndInit(t, l, id)
	held := func(what string) {
		t.Helper()
		if !poll(5*time.Second, func() bool { return argv0(sup) == "tent-idle-supervisor" && argv0(initPID) == "tent-idle" }) {
			t.Fatalf("%s: no idle holders: the supervisor is %q, the init %q", what, argv0(sup), argv0(initPID))
		}
	}
	r := l.tent(t, "exec", id, "--", "sh", "-c", "getent hosts names.example | cut -d' ' -f1; echo idle > /tmp/f; setsid python3 -m http.server 8000 -d /tmp </dev/null >/dev/null 2>&1 &")
	r.expect(t, 0)
	addr := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(addr, "198.1") {
		t.Fatalf("names.example resolved to %q", addr)
	}
	held("after exec")
	hostAddr := strings.TrimPrefix(strings.TrimSpace(l.tent(t, "port", id, "8000").stdout), "8000/tcp -> ")
	var body string
	for deadline := time.Now().Add(60 * time.Second); body != "idle\n"; time.Sleep(50 * time.Millisecond) {
		if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + hostAddr + "/f"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET through the published port of an idle sandbox: %q", body)
		}
	}
	held("after a published connection")
	// The cached address, after two hand-offs: still names.example (whose
	// host-side lookup then fails: this machine has no such name).
	l.tent(t, "exec", id, "--", "python3", "-c", fmt.Sprintf(`import socket
try: socket.create_connection(("%s", 443), timeout=10).recv(1)
except OSError: pass`, addr)).expect(t, 0)
	b, err := os.ReadFile(netLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"proto":"transparent","host":"names.example","port":443`) {
		t.Errorf("the cached address lost its name across the hand-off; net log:\n%s", b)
	}
}

// TestPublishOnARunningSandbox: tent port -p adds a port to a sandbox
// that runs (which docker cannot), reached from the host at once and
// listed by tent port after; bad values are refused before anything is
// published; tent rm closes it.
func TestPublishOnARunningSandbox(t *testing.T) {
	t.Parallel()
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		t.Fatal(err)
	}
	l := newLife(t)
	id := l.create(t, "--ro", probe+":"+sandboxtest.ProbeTarget)
	l.tent(t, "port", id, "-p", "8000", "-p", "8080:0").expect(t, exitRefused, `-p "8080:0": port "0" is not a port`)
	l.tent(t, "port", id, "8000", "-p", "8000").expect(t, exitRefused, "give no PORT with it")
	if r := l.tent(t, "port", id); r.code != 0 || r.stdout != "" {
		t.Fatalf("tent port after refusals: %+v, want no port", r)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "setsid "+sandboxtest.ProbeTarget+"/testprobe httpserve 127.0.0.1:8000 </dev/null >/dev/null 2>&1 &").expect(t, 0)
	r := l.tent(t, "port", id, "-p", "127.0.0.1::8000")
	r.expect(t, 0)
	hostAddr, ok := strings.CutPrefix(strings.TrimSpace(r.stdout), "8000/tcp -> 127.0.0.1:")
	if !ok {
		t.Fatalf("tent port -p: %q", r.stdout)
	}
	hostAddr = "127.0.0.1:" + hostAddr
	if got := strings.TrimSpace(l.tent(t, "port", id, "8000").stdout); got != "8000/tcp -> "+hostAddr {
		t.Errorf("tent port ID 8000 after -p: %q", got)
	}
	if body := getUntilOK(t, "http://"+hostAddr+"/f"); !strings.HasPrefix(body, "GET /f\nHost: "+hostAddr+"\n") {
		t.Errorf("the server inside received: %q", body)
	}
	l.tent(t, "rm", id).expect(t, 0)
	if c, err := net.Dial("tcp", hostAddr); err == nil {
		c.Close()
		t.Errorf("%s still listens after tent rm", hostAddr)
	}
}

// getUntilOK GETs url until it answers 200 (a server inside is starting),
// within a minute, and returns the body.
func getUntilOK(t *testing.T, url string) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(b); resp.StatusCode == 200 {
				return body
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v %q", url, err, body)
		}
	}
}
