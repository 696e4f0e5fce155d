package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/npmtest"
)

// conformanceVersion is the MCP conformance suite the test runs.
const conformanceVersion = "0.1.16"

// conformanceExpected are the scenarios of the suite's active set (30)
// that tent mcp passes, sorted: every one that needs nothing but what
// tent serves (tools, logging, ping). The 22 others need what tent does
// not serve: the suite's own fixture tools (tools-call-* and
// elicitation-*: test_simple_text, test_image_content, test_error_handling,
// test_tool_with_progress, test_sampling, test_elicitation...), fixture
// prompts (prompts-get-*) and resources (resources-read-*,
// resources-templates-read), resource subscriptions and completions,
// which tent mcp does not declare.
var conformanceExpected = []string{
	"dns-rebinding-protection", "logging-set-level", "ping", "prompts-list", "resources-list",
	"server-initialize", "server-sse-multiple-streams", "tools-list",
}

// TestMCPConformance runs the official MCP conformance suite against
// tent mcp over Streamable HTTP (tent mcp --listen; a reverse proxy adds
// the bearer token, which the suite cannot send) and over stdio through a
// relay (HTTP in, one tent mcp process per session out). Node 20 lacks
// fs.globSync, which the suite imports: a --import preload resolves "fs"
// to a module that adds it (testdata/mcp-conformance), leaving the
// package as published.
func TestMCPConformance(t *testing.T) {
	node, modules, err := npmtest.Install(t.TempDir(), mcpNPMPackages...)
	if errors.Is(err, npmtest.ErrNoNode) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	preload := testdata(t, "mcp-conformance/globsync.mjs")
	state := filepath.Join(t.TempDir(), "state")

	t.Run("http", func(t *testing.T) {
		token := rand.Text()
		cmd := exec.Command(tentBin, "--state-dir", state, "mcp", "--listen", "127.0.0.1:0", "--token", token)
		cmd.Env = baseEnv()
		addr := startListening(t, cmd)
		target, _ := url.Parse("http://" + addr)
		proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the suite's: tent mcp's DNS-rebinding check sees it
			pr.Out.Header.Set("Authorization", "Bearer "+token)
		}}
		// Full duplex, as tent serve's port proxy is: otherwise Go's
		// server closes the request body when the answer's header goes
		// out, under the transport still probing it for its end, and
		// the transport cuts the answer (a tools/list timing out, once
		// in a hundred sessions under load).
		front := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).EnableFullDuplex()
			proxy.ServeHTTP(w, r)
		}))
		passed := runConformance(t, node, preload, suite, "http://"+front+"/")
		if !slices.Equal(passed, conformanceExpected) {
			t.Errorf("scenarios passed over HTTP: %v, want %v", passed, conformanceExpected)
		}
	})
	t.Run("stdio", func(t *testing.T) {
		relay := &stdioRelay{t: t, argv: []string{tentBin, "--state-dir", state, "mcp"}, sessions: map[string]*relaySession{}}
		t.Cleanup(relay.close)
		front := serveLoopback(t, relay)
		passed := runConformance(t, node, preload, suite, "http://"+front+"/")
		// The relay has no DNS-rebinding check of its own: that scenario
		// is HTTP's.
		want := slices.DeleteFunc(slices.Clone(conformanceExpected), func(s string) bool { return s == "dns-rebinding-protection" })
		if !slices.Equal(passed, want) {
			t.Errorf("scenarios passed over stdio: %v, want %v", passed, want)
		}
	})
	if r := tent(t, "--state-dir", state, "ls", "-q"); r.stdout != "" {
		t.Errorf("sandboxes left: %q", r.stdout)
	}
}

// startListening starts tent mcp --listen and returns its address.
func startListening(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "listening on http://"); ok {
			addr, _, _ := strings.Cut(rest, "/")
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return addr
		}
	}
	t.Fatal("tent mcp printed no address")
	return ""
}

// serveLoopback serves h on a loopback port until the test ends.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// resultStamp is the timestamp that ends a result directory's name.
var resultStamp = regexp.MustCompile(`-\d{4}-\d\d-\d\dT[0-9-]+Z$`)

// runConformance runs the suite's active server scenarios against url
// and returns the scenarios whose every check succeeded, sorted.
func runConformance(t *testing.T, node, preload, suite, url string) []string {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--import", preload, suite, "server", "--url", url, "-o", out)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	log, _ := cmd.CombinedOutput() // it exits non-zero when a scenario fails
	if ctx.Err() != nil {
		t.Fatalf("the suite did not finish:\n%s", log)
	}
	checks, _ := filepath.Glob(filepath.Join(out, "*", "checks.json"))
	if len(checks) == 0 {
		checks, _ = filepath.Glob(filepath.Join(out, "*", "*", "checks.json"))
	}
	if len(checks) == 0 {
		t.Fatalf("the suite wrote no results:\n%s", log)
	}
	var passed, failed []string
	for _, p := range checks {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var cs []struct{ ID, Status, ErrorMessage string }
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// Results are in server-SCENARIO-TIMESTAMP directories.
		name := strings.TrimPrefix(filepath.Base(filepath.Dir(p)), "server-")
		name = resultStamp.ReplaceAllString(name, "")
		why := ""
		for _, c := range cs {
			if c.Status == "FAILURE" && why == "" {
				why = c.ID + ": " + c.ErrorMessage
			}
		}
		if len(cs) > 0 && why == "" {
			passed = append(passed, name)
		} else {
			failed = append(failed, name+" ("+why+")")
		}
	}
	slices.Sort(passed)
	slices.Sort(failed)
	t.Logf("conformance %s at %s: %d scenarios passed %v; %d failed:\n%s", conformanceVersion, url, len(passed), passed, len(failed), strings.Join(failed, "\n"))
	return passed
}

// stdioRelay serves MCP's Streamable HTTP and relays each session's
// messages, unchanged, to a tent mcp process of its own over stdio: the
// conformance suite then tests the stdio server.
type stdioRelay struct {
	t        *testing.T
	argv     []string
	mu       sync.Mutex
	sessions map[string]*relaySession
}

type relaySession struct {
	http   *sdk.StreamableServerTransport
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *stdioRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("Mcp-Session-Id")
	r.mu.Lock()
	s := r.sessions[id]
	r.mu.Unlock()
	switch {
	case s != nil && req.Method == http.MethodDelete:
		s.http.ServeHTTP(w, req)
		s.cancel()
		<-s.done
		return
	case s != nil:
		s.http.ServeHTTP(w, req)
		return
	case id != "" || req.Method != http.MethodPost:
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	}
	s, err := r.start(rand.Text())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.http.ServeHTTP(w, req)
}

// start starts a session: an HTTP side and a tent mcp process.
func (r *stdioRelay) start(id string) (*relaySession, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &relaySession{http: &sdk.StreamableServerTransport{SessionID: id}, cancel: cancel, done: make(chan struct{})}
	in, err := s.http.Connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Env = baseEnv()
	out, err := (&sdk.CommandTransport{Command: cmd}).Connect(ctx)
	if err != nil {
		cancel()
		in.Close()
		return nil, err
	}
	pump := func(from, to sdk.Connection) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				cancel()
				return
			}
			if err := to.Write(ctx, msg); err != nil {
				cancel()
				return
			}
		}
	}
	go pump(in, out)
	go pump(out, in)
	go func() {
		<-ctx.Done()
		in.Close()
		out.Close() // closes tent mcp's stdin: it ends, killing its sandboxes
		r.mu.Lock()
		delete(r.sessions, id)
		r.mu.Unlock()
		close(s.done)
	}()
	r.mu.Lock()
	r.sessions[id] = s
	r.mu.Unlock()
	return s, nil
}

func (r *stdioRelay) close() {
	r.mu.Lock()
	ss := make([]*relaySession, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	r.mu.Unlock()
	for _, s := range ss {
		s.cancel()
		<-s.done
	}
}
