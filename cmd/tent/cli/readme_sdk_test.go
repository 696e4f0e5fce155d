package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/e2bsdk"
	"github.com/tent-sandbox/tent/serve/codeinterp"
)

// runReadmeSDK runs a README block with an official E2B SDK and the three
// variables pointing at a `tent serve` of this build on a random loopback
// port, with the README's state directory: a ```js block with node (e2b
// at e2bsdk.Version, @e2b/code-interpreter at
// e2bsdk.CodeInterpreterVersion), or, with python set, a ```python block
// with the Python SDK (e2bsdk.PythonPackages, in a cached venv). The
// output must contain the text of the block's last comment ("// ", or
// "# ") on a line that prints (console.log, or print).
func runReadmeSDK(t *testing.T, where, state, src string, python bool) {
	t.Helper()
	if (python || strings.Contains(src, "@e2b/code-interpreter")) && os.Getenv("TENT_REQUIRE_SDK") == "" {
		if _, err := codeinterp.Probe(context.Background()); err != nil {
			t.Logf("%s: not run: %v", where, err)
			return
		}
	}
	work := t.TempDir()
	comment, printer, script := "// ", "console.log", "script.mjs"
	var run func(ctx context.Context) *exec.Cmd
	if python {
		comment, printer, script = "# ", "print(", "script.py"
		py, err := e2bsdk.InstallPython(t.TempDir())
		if errors.Is(err, e2bsdk.ErrNoPython) {
			t.Logf("%s: not run: %v", where, err)
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		run = func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, py, script) }
	} else {
		node, modules, err := e2bsdk.InstallCodeInterpreter(t.TempDir())
		if errors.Is(err, e2bsdk.ErrNoNode) {
			t.Logf("%s: not run: %v", where, err)
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
			t.Fatal(err)
		}
		run = func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, node, script) }
	}
	var want string
	for _, l := range strings.Split(src, "\n") {
		if code, c, ok := strings.Cut(l, comment); ok && strings.Contains(code, printer) {
			want = strings.TrimSpace(c)
		}
	}
	if want == "" {
		t.Fatalf("%s: the block has no %s line with a %q comment to check", where, printer, comment)
	}
	env, stop := startSDKServe(t, state)
	defer stop()
	if err := os.WriteFile(filepath.Join(work, script), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := run(ctx)
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "E2B_DEBUG=", "E2B_DOMAIN=", "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: %s: %v\n%s\nwant output containing %q", where, script, err, out, want)
	}
}

// startSDKServe starts `tent serve` of this build with the state
// directory state on a random loopback port, with extra flags, and
// returns the E2B variables its clients need and what stops it (SIGTERM,
// then a wait: idempotent).
func startSDKServe(t *testing.T, state string, extra ...string) (env []string, stop func()) {
	t.Helper()
	srv := exec.Command(tentBin, append([]string{"--state-dir", state, "serve", "--listen", "127.0.0.1:0"}, extra...)...)
	srv.Dir = t.TempDir()
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = srv.Process.Signal(syscall.SIGTERM)
			_ = srv.Wait()
		}
	}
	t.Cleanup(stop)
	// The server prints the variables to export, with the key's file.
	sc := bufio.NewScanner(stderr)
	for env == nil && sc.Scan() {
		if vars, ok := strings.CutPrefix(sc.Text(), "export "); ok {
			env = strings.Fields(vars)
		}
	}
	go func() { // keep draining the log
		for sc.Scan() {
		}
	}()
	if env == nil {
		t.Fatal("tent serve printed no export line")
	}
	key, err := os.ReadFile(filepath.Join(state, "serve-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	for i, kv := range env {
		if strings.HasPrefix(kv, "E2B_API_KEY=") {
			env[i] = "E2B_API_KEY=" + strings.TrimSpace(string(key))
		}
	}
	return env, stop
}

// runSDKScript runs the ES module src with node and the SDK's modules,
// env added, within two minutes, and returns its output.
func runSDKScript(t *testing.T, node, modules, src string, env ...string) ([]byte, error) {
	t.Helper()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "script.mjs"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "script.mjs")
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "E2B_DEBUG=", "E2B_DOMAIN="), env...)
	return cmd.CombinedOutput()
}
