package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/e2bsdk"
	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// TestE2BSDK runs testdata/sdk/sdk_test.mjs, which drives the official
// E2B SDK (e2bsdk.Version, installed from npm, cached under the user's
// cache directory)
// against a server on a random loopback port, over the backend tent
// serve uses (supervised: each sandbox under its own supervisor process)
// and over a Local one. TENT_SDK_ONLY, a regexp, runs only the script's
// steps it matches.
func TestE2BSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SDK test installs an npm package and starts many sandboxes")
	}
	for _, kind := range []string{supervised.Name, "local"} {
		t.Run(kind, func(t *testing.T) { testE2BSDK(t, kind) })
	}
}

func testE2BSDK(t *testing.T, kind string) {
	e := startSDKServer(t, kind)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "from the host") }))
	defer host.Close()
	caps := e.local.Capabilities()
	out, err := e.node(t, "sdk_test.mjs",
		"HOST_URL="+host.URL, "RUN="+randomHex(4), "ONLY="+os.Getenv("TENT_SDK_ONLY"),
		"CAN_SUSPEND="+flag(caps.Suspend), "CAN_LIMIT="+flag(caps.NetworkPolicy),
		"HAS_CGROUP="+flag(caps.CgroupVersion != "" && caps.CgroupVersion != "none"))
	t.Logf("the SDK script (cgroup %s, suspend %v, limited network %v):\n%s", caps.CgroupVersion, caps.Suspend, caps.NetworkPolicy, out)
	if err != nil {
		t.Fatalf("the SDK script failed: %v", err)
	}
	if !strings.Contains(string(out), " 0 failed") {
		t.Fatal("the SDK script did not report its steps")
	}
}

// sdkEnv is a server on a loopback port over a backend, and the SDK to
// drive it; local is a Local backend for in-process baselines.
type sdkEnv struct {
	local   *sandbox.Local
	srv     *Server
	url     string
	key     string
	nodeBin string
	modules string
	logs    *syncBuffer
}

// startSDKServer starts the server for tb, with a template "tenttest",
// and installs the JavaScript SDK; it skips without node and npm. The
// server and its sandboxes end with tb.
func startSDKServer(tb testing.TB, kind string) *sdkEnv {
	tb.Helper()
	node, modules, err := e2bsdk.Install(tb.TempDir())
	if errors.Is(err, e2bsdk.ErrNoNode) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	e := startServer(tb, kind)
	e.nodeBin, e.modules = node, modules
	return e
}

// startServer is startSDKServer without the JavaScript SDK.
func startServer(tb testing.TB, kind string) *sdkEnv {
	tb.Helper()
	e := &sdkEnv{key: "e2b_" + randomHex(20), logs: &syncBuffer{}}
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	e.local = local
	var backend sandbox.Backend = local
	if kind == supervised.Name {
		sb, err := supervised.Open(tb.TempDir(), supervised.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		backend = sb
		tb.Cleanup(func() {
			// The server terminated what it made: nothing is left.
			if left, err := sb.List(context.Background()); err != nil || len(left) != 0 {
				tb.Errorf("sandboxes left after Close: %v, %v", left, err)
			}
		})
	}
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		tb.Fatal(err)
	}
	templates := tb.TempDir()
	writeFile(tb, filepath.Join(templates, "tenttest.yaml"), "hostname: tenttest\nenv: {FROM_TEMPLATE: \"yes\"}\nmounts: [{source: "+probe+", target: "+sandboxtest.ProbeTarget+"}]\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	e.url = "http://" + l.Addr().String()
	e.srv, err = New(backend, Options{APIKey: e.key, TemplatesDir: templates,
		Domain: "localhost:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port),
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		l.Close()
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, l) }()
	tb.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
		if err := e.srv.Close(context.Background(), false); err != nil {
			tb.Errorf("Close: %v", err)
		}
		if err := local.Close(context.Background()); err != nil {
			tb.Errorf("closing the backend: %v", err)
		}
		if tb.Failed() {
			tb.Logf("server log:\n%s", e.logs.String())
		}
	})
	return e
}

// node runs testdata/sdk/SCRIPT with the SDK pointed at the server and
// env added, and returns its output.
func (e *sdkEnv) node(tb testing.TB, script string, env ...string) ([]byte, error) {
	tb.Helper()
	work := tb.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "sdk", script))
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(work, script), string(b))
	if err := os.Symlink(e.modules, filepath.Join(work, "node_modules")); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.nodeBin, script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "E2B_API_URL="+e.url, "E2B_SANDBOX_URL="+e.url, "E2B_API_KEY="+e.key, "E2B_DEBUG=", "E2B_DOMAIN=")
	cmd.Env = append(cmd.Env, env...)
	return cmd.CombinedOutput()
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// syncBuffer is a strings.Builder for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
