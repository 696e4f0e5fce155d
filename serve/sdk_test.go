package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// sdkVersion is the E2B JavaScript SDK the integration test runs.
const sdkVersion = "2.51.0"

// TestE2BSDK runs testdata/sdk/sdk_test.mjs, which drives the official
// E2B SDK (installed from npm, cached under the user's cache directory)
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

// startSDKServer starts the server for tb, with a template "tenttest";
// it skips without node and npm. The server and its sandboxes end with
// tb.
func startSDKServer(tb testing.TB, kind string) *sdkEnv {
	tb.Helper()
	node, nerr := exec.LookPath("node")
	npm, perr := exec.LookPath("npm")
	if nerr != nil || perr != nil {
		tb.Skipf("node and npm are needed to run the E2B SDK (node: %v, npm: %v)", nerr, perr)
	}
	e := &sdkEnv{nodeBin: node, modules: installSDK(tb, npm), key: "e2b_" + randomHex(20), logs: &syncBuffer{}}
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
	templates := tb.TempDir()
	writeFile(tb, filepath.Join(templates, "tenttest.yaml"), "hostname: tenttest\nenv: {FROM_TEMPLATE: \"yes\"}\n")
	e.srv, err = New(backend, Options{APIKey: e.key, TemplatesDir: templates,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	e.url = "http://" + l.Addr().String()
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

// installSDK returns a node_modules directory holding e2b@sdkVersion:
// the one cached under the user's cache directory, else a fresh npm
// install, then cached there (an unwritable cache just means no cache).
func installSDK(t testing.TB, npm string) string {
	t.Helper()
	cacheRoot, err := os.UserCacheDir()
	if err != nil {
		cacheRoot = t.TempDir()
	}
	parent := filepath.Join(cacheRoot, "tent-test")
	dir := filepath.Join(parent, "e2b-"+sdkVersion)
	modules := filepath.Join(dir, "node_modules")
	if installed(modules) {
		return modules
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		parent = t.TempDir()
	}
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	writeFile(t, filepath.Join(tmp, "package.json"), `{"private": true}`)
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--no-package-lock", "--loglevel=error", "e2b@"+sdkVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(parent, "npm-cache"), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install e2b@%s: %v\n%s", sdkVersion, err, out)
	}
	if !installed(filepath.Join(tmp, "node_modules")) {
		t.Fatalf("npm install e2b@%s left no node_modules/e2b of that version", sdkVersion)
	}
	if err := os.Rename(tmp, dir); err == nil {
		return modules
	} else if installed(modules) { // another run won the race
		return modules
	}
	keep := t.TempDir()
	if err := os.Rename(tmp, filepath.Join(keep, "sdk")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(keep, "sdk", "node_modules")
}

// installed reports whether modules holds e2b at sdkVersion.
func installed(modules string) bool {
	b, err := os.ReadFile(filepath.Join(modules, "e2b", "package.json"))
	var pkg struct{ Version string }
	return err == nil && json.Unmarshal(b, &pkg) == nil && pkg.Version == sdkVersion
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
