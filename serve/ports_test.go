package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// echoHeaders answers with the request's method, path, Host and headers,
// as testprobe httpserve does inside a real sandbox.
func echoHeaders(w http.ResponseWriter, r *http.Request) {
	var lines []string
	for k, vs := range r.Header {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	fmt.Fprintf(w, "%s %s\nHost: %s\n%s\n", r.Method, r.URL.RequestURI(), r.Host, strings.Join(lines, "\n"))
}

// portGet sends a GET to the server with the given Host and headers.
func portGet(t *testing.T, base, host string, hdr ...string) response {
	t.Helper()
	return hostRequest(t, "GET", base+"/some/path?q=1", host, hdr...)
}

// hostRequest sends a bodiless request to url with the given Host (""
// keeps url's) and headers.
func hostRequest(t *testing.T, method, url, host string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func TestPortHost(t *testing.T) {
	for _, c := range []struct {
		host string
		port int
		id   string
		ok   bool
	}{
		{"8000-abc123.localhost:49982", 8000, "abc123", true},
		{"3000-i5q2b.e2b.app", 3000, "i5q2b", true},
		{"49983-abc.localhost", 49983, "abc", true},
		{"localhost:49982", 0, "", false},
		{"127.0.0.1:49982", 0, "", false},
		{"8000-.localhost", 0, "", false},
		{"0-abc.localhost", 0, "", false},
		{"08000-abc.localhost", 0, "", false},
		{"65536-abc.localhost", 0, "", false},
		{"+80-abc.localhost", 0, "", false},
		{"abc-8000.localhost", 0, "", false},
		{"8000-abc", 0, "", false},
	} {
		port, id, ok := portHost(c.host)
		if port != c.port || id != c.id || ok != c.ok {
			t.Errorf("portHost(%q) = %d, %q, %v; want %d, %q, %v", c.host, port, id, ok, c.port, c.id, c.ok)
		}
	}
}

// TestPortRequests: getHost's host name and E2B's port headers reach the
// port inside; the API key, access tokens and routing headers stay out;
// a sandbox with allowPublicTraffic false needs its own traffic token
// (403 otherwise, another sandbox's included); maskRequestHost rewrites
// Host; a closed port and a missing sandbox are E2B's 502s; envd's port
// is the in-sandbox API.
func TestPortRequests(t *testing.T) {
	inside := httptest.NewServer(http.HandlerFunc(echoHeaders))
	t.Cleanup(inside.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	h := newHarness(t, Options{Domain: "localhost:49982"})
	h.f.dial = func(id string, port int) (net.Conn, error) {
		if port == 8000 {
			return net.Dial("tcp", inside.Listener.Addr().String())
		}
		return net.Dial("tcp", closedAddr)
	}
	public := h.create(`{"templateID":"base"}`)
	if public.TrafficAccessToken != nil {
		t.Errorf("a public sandbox's trafficAccessToken: %q, want none", *public.TrafficAccessToken)
	}
	if public.Domain == nil || *public.Domain != "localhost:49982" {
		t.Errorf("domain: %v, want localhost:49982", public.Domain)
	}
	id := public.SandboxID
	host := "8000-" + id + ".localhost:49982"

	r := portGet(t, h.url, host, "X-API-Key", testKey, headerAccessToken, public.EnvdAccessToken, headerTrafficToken, "whatever", "X-Mine", "kept")
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "GET /some/path?q=1\nHost: "+host+"\n") || !strings.Contains(string(r.body), "X-Mine: kept") {
		t.Fatalf("GET through getHost's host: %d %q", r.status, r.body)
	}
	for _, leaked := range []string{testKey, public.EnvdAccessToken, "whatever", "E2b-Sandbox"} {
		if strings.Contains(string(r.body), leaked) {
			t.Errorf("the server inside received %q:\n%s", leaked, r.body)
		}
	}
	// E2B's headers instead of the host name.
	r = portGet(t, h.url, "", headerSandboxID, id, headerSandboxPort, "8000")
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "GET /some/path?q=1\n") {
		t.Errorf("GET through E2b-Sandbox-Id/-Port: %d %q", r.status, r.body)
	}
	// Under another domain than the server's, the host name is not a
	// port's: the request is the control plane's (no API key: 401).
	if r := portGet(t, h.url, "8000-"+id+".example.com"); r.status != http.StatusUnauthorized {
		t.Errorf("a port host name under another domain: %d %s, want the control plane's 401", r.status, r.body)
	}
	// Nothing listens on 3000.
	r = portGet(t, h.url, "3000-"+id+".localhost:49982")
	var pe portError
	if r.status != http.StatusBadGateway || json.Unmarshal(r.body, &pe) != nil || pe.Message != "The sandbox is running but port is not open" || pe.Port != 3000 {
		t.Errorf("a closed port: %d %s", r.status, r.body)
	}
	// No such sandbox: E2B's answer.
	r = portGet(t, h.url, "8000-0123456789abcdef.localhost:49982")
	if r.status != http.StatusBadGateway || json.Unmarshal(r.body, &pe) != nil || pe.Message != "The sandbox was not found" || pe.SandboxID != "0123456789abcdef" || pe.Code != 502 {
		t.Errorf("a missing sandbox: %d %s", r.status, r.body)
	}
	// envd's port is the in-sandbox API, with its own token.
	if r = portGet(t, h.url, "49983-"+id+".localhost:49982"); r.status != http.StatusUnauthorized {
		t.Errorf("envd's port without its access token: %d %s, want 401", r.status, r.body)
	}
	if r = portGet(t, h.url, "49983-"+id+".localhost:49982", headerAccessToken, public.EnvdAccessToken); r.status != http.StatusOK || r.header.Get("X-Sandbox") != id {
		t.Errorf("envd's port with its access token: %d %q, want the in-sandbox API", r.status, r.body)
	}

	private := h.create(`{"templateID":"base","network":{"allowPublicTraffic":false,"maskRequestHost":"custom-host.example.com:${PORT}"}}`)
	if private.TrafficAccessToken == nil || *private.TrafficAccessToken == "" {
		t.Fatalf("a private sandbox's create answer has no trafficAccessToken: %+v", private)
	}
	phost := "8000-" + private.SandboxID + ".localhost:49982"
	other := h.create(`{"templateID":"base","network":{"allowPublicTraffic":false}}`)
	for _, c := range []struct{ name, token string }{
		{"no token", ""},
		{"a wrong token", "nope"},
		{"another sandbox's token", *other.TrafficAccessToken},
		{"its envd access token", private.EnvdAccessToken},
	} {
		var hdr []string
		if c.token != "" {
			hdr = []string{"e2b-traffic-access-token", c.token}
		}
		if r := portGet(t, h.url, phost, hdr...); r.status != http.StatusForbidden || strings.Contains(string(r.body), "Host:") {
			t.Errorf("a private sandbox's port with %s: %d %q, want 403", c.name, r.status, r.body)
		}
	}
	r = portGet(t, h.url, phost, "e2b-traffic-access-token", *private.TrafficAccessToken)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "\nHost: custom-host.example.com:8000\n") {
		t.Errorf("a private sandbox's port with its token (maskRequestHost): %d %q", r.status, r.body)
	}
	if strings.Contains(string(r.body), *private.TrafficAccessToken) {
		t.Errorf("the traffic token reached the server inside: %q", r.body)
	}
	if r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","network":{"maskRequestHost":"evil\r\nX-Injected: 1"}}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "maskRequestHost") {
		t.Errorf("a maskRequestHost with a line break: %d %s, want 400 naming the field", r.status, r.body)
	}
	// connect hands the token out again.
	c := decode[sandboxResponse](t, h.do("POST", "/sandboxes/"+private.SandboxID+"/connect", `{"timeout":60}`))
	if c.TrafficAccessToken == nil || *c.TrafficAccessToken != *private.TrafficAccessToken {
		t.Errorf("connect's trafficAccessToken: %v", c.TrafficAccessToken)
	}
}

// TestPortsPrivateByOption: with PrivatePorts, every sandbox's ports need
// its traffic token.
func TestPortsPrivateByOption(t *testing.T) {
	inside := httptest.NewServer(http.HandlerFunc(echoHeaders))
	t.Cleanup(inside.Close)
	h := newHarness(t, Options{PrivatePorts: true})
	h.f.dial = func(string, int) (net.Conn, error) { return net.Dial("tcp", inside.Listener.Addr().String()) }
	sr := h.create(`{"templateID":"base"}`)
	if sr.TrafficAccessToken == nil {
		t.Fatal("no trafficAccessToken with PrivatePorts")
	}
	if sr.Domain != nil {
		t.Errorf("domain without Options.Domain: %q, want none", *sr.Domain)
	}
	host := "8000-" + sr.SandboxID + ".e2b.app"
	if r := portGet(t, h.url, host); r.status != http.StatusForbidden {
		t.Errorf("without the token: %d %s", r.status, r.body)
	}
	if r := portGet(t, h.url, host, "e2b-traffic-access-token", *sr.TrafficAccessToken); r.status != http.StatusOK {
		t.Errorf("with the token: %d %s", r.status, r.body)
	}
}

// TestGetHostRealSandbox: a server inside a real sandbox of the server is
// reached through getHost's host name, a websocket upgrade included, and
// the sandbox's end closes what was open to it and answers 502 after.
func TestGetHostRealSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	ctx := context.Background()
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		t.Fatal(err)
	}
	templates := t.TempDir()
	writeFile(t, filepath.Join(templates, "web.yaml"), "mounts: [{source: "+probe+", target: "+sandboxtest.ProbeTarget+"}]\n")
	h, local := newLocalHarness(t, Options{TemplatesDir: templates, Domain: "localhost:1"})

	sr := h.create(`{"templateID":"web"}`)
	id := sr.SandboxID
	res, err := handleOf(t, local, id).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "setsid " + sandboxtest.ProbeTarget + "/testprobe httpserve 0.0.0.0:8000 </dev/null >/dev/null 2>&1 &"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("starting the server inside: %v %+v", err, res)
	}
	host := "8000-" + id + "." + *sr.Domain
	var r response
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r = portGet(t, h.url, host); r.status == http.StatusOK {
			break
		}
	}
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "GET /some/path?q=1\nHost: "+host+"\n") {
		t.Fatalf("GET through getHost: %d %q", r.status, r.body)
	}

	// A websocket: the upgrade goes through and bytes flow both ways.
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-Websocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("the websocket handshake: %v %+v", err, resp)
	}
	for _, msg := range []string{"hello", strings.Repeat("x", 100000)} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: %v (got %d bytes)", len(msg), err, len(got))
		}
	}

	// The sandbox ends: the open websocket ends with it, and its host
	// name answers E2B's 502.
	if r := h.do("DELETE", "/sandboxes/"+id, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if _, err := io.ReadAll(br); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the websocket after the sandbox's end: %v, want its close", err)
	}
	r = portGet(t, h.url, host)
	var pe portError
	if r.status != http.StatusBadGateway || json.Unmarshal(r.body, &pe) != nil || pe.Message != "The sandbox was not found" {
		t.Errorf("after kill: %d %s", r.status, r.body)
	}
}

// TestPortRequestsBounded: a sandbox's port requests count against its
// in-sandbox request slots (429 past them, the sandbox's other clients
// unaffected once they end), and a server inside that sends an endless
// header is cut off at maxPortHeaderBytes with a 502.
func TestPortRequestsBounded(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/block":
			entered <- struct{}{}
			<-release
		case "/huge":
			w.Header().Set("X-Huge", strings.Repeat("h", 2*maxPortHeaderBytes))
		}
		io.WriteString(w, "done")
	}))
	t.Cleanup(inside.Close)
	h := newHarness(t, Options{MaxStreamsPerSandbox: 2})
	h.f.dial = func(string, int) (net.Conn, error) { return net.Dial("tcp", inside.Listener.Addr().String()) }
	id := h.create(`{"templateID":"base"}`).SandboxID
	host := "8000-" + id + ".localhost"
	get := func(path string) response {
		t.Helper()
		req, _ := http.NewRequest("GET", h.url+path, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, body: b}
	}
	done := make(chan response, 2)
	for range 2 {
		go func() { done <- get("/block") }()
		<-entered
	}
	if r := get("/"); r.status != http.StatusTooManyRequests {
		t.Errorf("a third request with two in flight: %d %s, want 429", r.status, r.body)
	}
	close(release)
	for range 2 {
		if r := <-done; r.status != http.StatusOK || string(r.body) != "done" {
			t.Errorf("a blocked request, released: %d %s", r.status, r.body)
		}
	}
	if r := get("/huge"); r.status != http.StatusBadGateway {
		t.Errorf("an endless header from inside: %d %s, want 502", r.status, r.body)
	}
	if r := get("/"); r.status != http.StatusOK {
		t.Errorf("after the others: %d %s", r.status, r.body)
	}
}

// TestPortRequestFullDuplex: a server inside that answers a POST before
// it has read the body (an upload that reports progress, a streaming
// RPC) gets the whole body, and its client the whole answer. Go's
// HTTP/1 server would otherwise, once the proxy writes the answer's
// header, swallow what is left of the request body and close it under
// the transport still forwarding it: the upload stalls, or the proxy's
// connection inside is cut and the answer with it (what the MCP
// conformance suite hit through a plain httputil.ReverseProxy).
func TestPortRequestFullDuplex(t *testing.T) {
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		io.WriteString(w, "started\n")
		w.(http.Flusher).Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "received %d %v\n", n, err)
	}))
	t.Cleanup(inside.Close)
	h := newHarness(t, Options{})
	h.f.dial = func(string, int) (net.Conn, error) { return net.Dial("tcp", inside.Listener.Addr().String()) }
	id := h.create(`{"templateID":"base"}`).SandboxID

	// What is left of the body when the header comes back: under Go's
	// server's 256 KiB it swallowed it, over it cut the answer.
	for _, restLen := range []int{100, 300 << 10} {
		t.Run(fmt.Sprintf("%d bytes left", restLen), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first, rest := strings.Repeat("a", 1000), strings.Repeat("b", restLen)
			pr, pw := io.Pipe()
			context.AfterFunc(ctx, func() { pw.CloseWithError(errors.New("no answer in time")) }) // else the client's transport waits on the body for ever
			req, err := http.NewRequestWithContext(ctx, "POST", h.url+"/upload", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "8000-" + id + ".localhost"
			req.ContentLength = int64(len(first) + len(rest))
			// The two parts go in order: the first one's write can be still
			// under way when the answer's first line arrives (the server
			// inside answers before it reads), and a pipe does not order
			// writes from two goroutines.
			firstSent := make(chan struct{})
			go func() {
				defer close(firstSent)
				io.WriteString(pw, first)
			}()
			// The answer's header arrives while the rest of the body is unsent.
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("the answer's header before the whole body: %v", err)
			}
			defer res.Body.Close()
			br := bufio.NewReader(res.Body)
			if line, err := br.ReadString('\n'); line != "started\n" {
				t.Fatalf("the answer's first line: %q %v", line, err)
			}
			go func() {
				<-firstSent
				io.WriteString(pw, rest)
				pw.Close()
			}()
			b, err := io.ReadAll(br)
			if want := fmt.Sprintf("received %d <nil>\n", len(first)+len(rest)); string(b) != want || err != nil {
				t.Errorf("the rest of the answer: %q %v, want %q", b, err, want)
			}
		})
	}
}
