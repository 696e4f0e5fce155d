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

// runReadmeSDK runs a README ```js block with node, the official E2B SDKs
// (e2b at e2bsdk.Version, @e2b/code-interpreter at
// e2bsdk.CodeInterpreterVersion) and the three variables pointing at a `tent serve` of
// this build on a random loopback port, with the README's state
// directory; the output must contain the text of the block's last
// "// " comment on a console.log line.
func runReadmeSDK(t *testing.T, where, state, src string) {
	t.Helper()
	if strings.Contains(src, "@e2b/code-interpreter") && os.Getenv("TENT_REQUIRE_SDK") == "" {
		if _, err := codeinterp.Probe(context.Background()); err != nil {
			t.Logf("%s: not run: %v", where, err)
			return
		}
	}
	node, modules, err := e2bsdk.InstallCodeInterpreter(t.TempDir())
	if errors.Is(err, e2bsdk.ErrNoNode) {
		t.Logf("%s: not run: %v", where, err)
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var want string
	for _, l := range strings.Split(src, "\n") {
		if code, comment, ok := strings.Cut(l, "// "); ok && strings.Contains(code, "console.log") {
			want = strings.TrimSpace(comment)
		}
	}
	if want == "" {
		t.Fatalf("%s: the block has no console.log line with a // comment to check", where)
	}
	env, stop := startSDKServe(t, state)
	defer stop()
	out, err := runSDKScript(t, node, modules, src, env...)
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: node: %v\n%s\nwant output containing %q", where, err, out, want)
	}
}

// runReadmeSDKPython runs a README ```python block with the official
// Python SDKs (e2bsdk.PythonPackages, in a cached venv) against a `tent
// serve` of this build, as runReadmeSDK runs a ```js one; the output must
// contain the text of the block's last "# " comment on a print line.
func runReadmeSDKPython(t *testing.T, where, state, src string) {
	t.Helper()
	if os.Getenv("TENT_REQUIRE_SDK") == "" {
		if _, err := codeinterp.Probe(context.Background()); err != nil {
			t.Logf("%s: not run: %v", where, err)
			return
		}
	}
	python, err := e2bsdk.InstallPython(t.TempDir())
	if errors.Is(err, e2bsdk.ErrNoPython) {
		t.Logf("%s: not run: %v", where, err)
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var want string
	for _, l := range strings.Split(src, "\n") {
		if code, comment, ok := strings.Cut(l, "# "); ok && strings.Contains(code, "print(") {
			want = strings.TrimSpace(comment)
		}
	}
	if want == "" {
		t.Fatalf("%s: the block has no print line with a # comment to check", where)
	}
	env, stop := startSDKServe(t, state)
	defer stop()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "script.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "script.py")
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "E2B_DEBUG=", "E2B_DOMAIN=", "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: python: %v\n%s\nwant output containing %q", where, err, out, want)
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
