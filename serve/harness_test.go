package serve

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

const testKey = "e2b_test_key"

// harness is a server over a fake backend, behind httptest.
type harness struct {
	t    *testing.T
	f    *fakeBackend
	api  *fakeAPI
	s    *Server
	url  string
	opts Options // as New was given them
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, f: newFake(), api: &fakeAPI{release: make(chan struct{}), entered: make(chan struct{}, 16)}}
	opts.APIKey = testKey
	if opts.SecretsFile != "" && opts.Secrets == nil {
		// The store beside the index, as the supervised backend's state
		// directory holds both under tent serve.
		opts.Secrets = secretstore.Open(filepath.Dir(opts.SecretsFile))
	}
	if opts.SandboxAPI == nil {
		opts.SandboxAPI = h.api
	}
	s, err := New(h.f, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.s, h.opts = s, opts
	h.url = newTestHTTP(t, s)
	t.Cleanup(func() { _ = s.Close(context.Background(), false) })
	return h
}

// restart stops the server keeping its sandboxes, then between (nil
// for none) starts a new one over the same backend and options, as
// `tent serve --keep-sandboxes` restarted over its state directory.
func (h *harness) restart(between func()) {
	h.t.Helper()
	if err := h.s.Close(context.Background(), true); err != nil {
		h.t.Fatal(err)
	}
	if between != nil {
		between()
	}
	s, err := New(h.f, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = s.Close(context.Background(), false) })
	h.s, h.url = s, newTestHTTP(h.t, s)
}

// newTestHTTP serves s on a loopback port until the test ends.
func newTestHTTP(t *testing.T, s *Server) string {
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// newTestLocal is a Local backend with lo that ends with t: real
// sandboxes.
func newTestLocal(t *testing.T, lo sandbox.LocalOptions) *sandbox.Local {
	t.Helper()
	local, err := sandbox.NewLocal(lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close(context.Background()) })
	return local
}

// newLocalHarness is a server with opts (and the test key) over a new
// Local backend, which it returns too: real sandboxes. Both end with t.
func newLocalHarness(t *testing.T, opts Options) (*harness, *sandbox.Local) {
	t.Helper()
	local := newTestLocal(t, sandbox.LocalOptions{})
	return serveOver(t, local, opts), local
}

// serveOver is a server with opts (and the test key) over b, behind
// httptest; it is closed, without keeping its sandboxes, at t's end.
func serveOver(t *testing.T, b sandbox.Backend, opts Options) *harness {
	t.Helper()
	opts.APIKey = testKey
	s, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background(), false) })
	return &harness{t: t, s: s, url: newTestHTTP(t, s)}
}

// shIn runs script with sh in sandbox id of b and returns its trimmed
// stdout, failing the test unless it exits 0.
func shIn(t *testing.T, b sandbox.Backend, id, script string) string {
	t.Helper()
	res, err := handleOf(t, b, id).Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s in %s: %v %+v", script, id, err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	body   []byte
	closed bool // the server closes the connection after it
}

// errBody decodes E2B's error body, failing when it is not one.
func (r response) errBody(t *testing.T) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Code != r.status || e.Message == "" {
		t.Fatalf("status %d: body %q is not E2B's error JSON with that code", r.status, r.body)
	}
	return e
}

// do sends a request; hdr holds header names and values in pairs. With
// no X-API-Key among them, the right key is sent for control-plane paths.
func (h *harness) do(method, path, body string, hdr ...string) response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	keySet := false
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
		if strings.EqualFold(hdr[i], "X-API-Key") || strings.EqualFold(hdr[i], headerSandboxID) {
			keySet = true
		}
	}
	if !keySet {
		req.Header.Set("X-API-Key", testKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b, closed: res.Close}
}

// create creates a sandbox and returns the response.
func (h *harness) create(body string) sandboxResponse {
	h.t.Helper()
	r := h.do("POST", "/v2/sandboxes", body)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create %s: status %d: %s", body, r.status, r.body)
	}
	var sr sandboxResponse
	if err := json.Unmarshal(r.body, &sr); err != nil {
		h.t.Fatal(err)
	}
	return sr
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
	return v
}

func readAllBody(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("condition not met within %s", d)
}

// serveTCP serves h's server on a loopback TCP listener of its own (as
// tent serve does) until the test ends.
func (h *harness) serveTCP() net.Listener {
	h.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.s.Serve(ctx, l) }()
	h.t.Cleanup(func() { stop(); <-done })
	return l
}

// dirNames returns the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	return got
}
