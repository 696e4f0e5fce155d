package serve

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestForgedSignatureIsCheap: a signed /files URL with a forged
// signature and no key is refused from what the server holds in memory:
// the backend is not asked for its sandboxes (no record is read), and a
// signature of the wrong form is refused before any hashing.
func TestForgedSignatureIsCheap(t *testing.T) {
	h := newHarness(t, Options{})
	for range 3 {
		h.create(`{}`)
	}
	h.f.mu.Lock()
	h.f.calls = nil
	h.f.mu.Unlock()
	for _, sig := range []string{
		"v1_" + strings.Repeat("A", 43), // the right form, nobody's
		"v1_x",                          // the wrong form
		strings.Repeat("Z", 4096),
	} {
		r := h.do("GET", "/files?path=/etc/passwd&signature="+sig, "", "X-API-Key", "")
		if r.status != http.StatusUnauthorized {
			t.Errorf("signature %.10s...: %d %s, want 401", sig, r.status, r.body)
		}
		if !r.closed {
			t.Errorf("signature %.10s...: the refusal keeps the connection open", sig)
		}
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if len(h.f.calls) != 0 {
		t.Errorf("forged signatures made the backend work: %v", h.f.calls)
	}
}

// TestUnauthenticatedRefusalClosesConn: a client without a key cannot
// keep a connection idle after its refusal (it would hold one of the
// server's connections for the idle timeout); one with a key can.
func TestUnauthenticatedRefusalClosesConn(t *testing.T) {
	h := newHarness(t, Options{})
	l := h.serveTCP()
	for _, c := range []struct {
		key       string
		wantClose bool
	}{{"", true}, {"e2b_wrong", true}, {testKey, false}} {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "http://"+l.Addr().String()+"/v2/sandboxes", nil)
		if c.key != "" {
			req.Header.Set("X-API-Key", c.key)
		}
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		conn.Close()
		if res.Close != c.wantClose {
			t.Errorf("key %q: status %d, connection closed after the answer: %v, want %v", c.key, res.StatusCode, res.Close, c.wantClose)
		}
	}
}

// TestConnectionFloodDoesNotStarve: 1100 connections from a client
// without a key, held open and idle, do not keep an authenticated
// client out: its request is answered while the flood is held, long
// before the flood's connections would time out (readHeaderTimeout),
// which is when the server used to free a slot.
func TestConnectionFloodDoesNotStarve(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: opens 1100 connections")
	}
	h := newHarness(t, Options{})
	h.create(`{}`)
	l := h.serveTCP()
	start := time.Now()
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for range 1100 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("flood connection %d: %v", len(flood), err)
		}
		flood = append(flood, c)
	}
	// The server used to answer only once the flood's first
	// connections timed out, readHeaderTimeout after they were made.
	deadline := start.Add(readHeaderTimeout - time.Second)
	if time.Until(deadline) < 3*time.Second {
		t.Skipf("making the flood took %s: too slow a machine to tell the bound from the timeout", time.Since(start))
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Until(deadline)}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://"+l.Addr().String()+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", testKey)
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("an authenticated request during a flood of %d idle connections: %v", len(flood), err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("an authenticated request during the flood: status %d", res.StatusCode)
	}
	// What made room: the flood's oldest connections were closed by the
	// server, and at most the per-peer bound of them is left.
	h.s.conns.mu.Lock()
	unauth := h.s.conns.unauth
	h.s.conns.mu.Unlock()
	if unauth > DefaultMaxUnauthConnsPerPeer {
		t.Errorf("%d unauthenticated connections held, over the per-peer bound %d", unauth, DefaultMaxUnauthConnsPerPeer)
	}
}

// TestBaseTemplateLimits: the base template is bounded (E2B's size and a
// process cap) where the host gives sandboxes a cgroup, configurably;
// where it gives none, base runs unbounded and the server says so at
// start.
func TestBaseTemplateLimits(t *testing.T) {
	custom := sandbox.Limits{Memory: 1 << 30, Pids: 64, CPUs: 1}
	for _, c := range []struct {
		name   string
		cgroup string
		opt    *sandbox.Limits
		want   sandbox.Limits
		warns  bool
	}{
		{"default", "v2", nil, DefaultBaseLimits, false},
		{"configured", "v1", &custom, custom, false},
		{"turned off", "v2", &sandbox.Limits{}, sandbox.Limits{}, false},
		{"no cgroup", "none", nil, sandbox.Limits{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			f.caps.CgroupVersion = c.cgroup
			var logs bytes.Buffer
			s, err := New(f, Options{APIKey: testKey, BaseLimits: c.opt, SandboxAPI: &fakeAPI{},
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(context.Background(), false) })
			if got := strings.Contains(logs.String(), "without memory, CPU and process limits"); got != c.warns {
				t.Errorf("warned at start: %v, want %v: %s", got, c.warns, logs.String())
			}
			h := &harness{t: t, f: f, s: s, url: newTestHTTP(t, s)}
			id := h.create(pythonCreateBody).SandboxID
			if got := f.boxes[id].Spec.Limits; got != c.want {
				t.Errorf("base sandbox limits %+v, want %+v", got, c.want)
			}
		})
	}
	if DefaultBaseLimits.CPUs != 2 || DefaultBaseLimits.Memory != 512<<20 || DefaultBaseLimits.Pids == 0 {
		t.Errorf("DefaultBaseLimits %+v: want E2B's 2 CPUs, 512 MiB and a process cap", DefaultBaseLimits)
	}
}

// TestBaseTemplateIsBounded: a sandbox of the base template cannot fill
// the host's memory through its tmpfs /tmp (charged to its memory
// limit) nor fork without bound, where the host gives a cgroup. The
// limits are made small here so that the test is cheap.
func TestBaseTemplateIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	ctx := context.Background()
	local := newTestLocal(t, sandbox.LocalOptions{})
	if cg := local.Capabilities().CgroupVersion; cg == "none" {
		t.Skip("no cgroup for sandboxes on this host: the server says so at start (TestBaseTemplateLimits)")
	}
	h := serveOver(t, local, Options{BaseLimits: &sandbox.Limits{Memory: 64 << 20, Pids: 32, CPUs: 1}})
	run := func(script string) (*sandbox.ExecResult, error) {
		id := h.create(pythonCreateBody).SandboxID
		return handleOf(t, local, id).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Timeout: time.Minute})
	}
	// Forty sleepers under a cap of 32 processes: the shell cannot fork
	// them all.
	res, err := run(`for i in $(seq 40); do sleep 60 </dev/null >/dev/null 2>&1 & done; echo all started`)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 && strings.Contains(string(res.Stdout), "all started") {
		t.Errorf("40 processes started under a cap of 32")
	}
	// 128 MiB into /tmp, twice the limit: the write fails, or the memory
	// limit's OOM kill ends the sandbox; never does it all land.
	res, err = run(`head -c 134217728 /dev/zero > /tmp/fill; echo $?; du -m /tmp/fill | cut -f1`)
	if err == nil && strings.HasPrefix(string(res.Stdout), "0\n128") {
		t.Errorf("128 MiB written to /tmp under a 64 MiB limit: %q", res.Stdout)
	}
	t.Logf("filling /tmp past the limit: %v, %+v", err, res)
}
