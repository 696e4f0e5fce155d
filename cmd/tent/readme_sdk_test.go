package main

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
)

// runReadmeSDK runs a README ```js block with node, the official E2B SDK
// (e2bsdk.Version) and the three variables pointing at a `tent serve` of
// this build on a random loopback port, with the README's state
// directory; the output must contain the text of the block's last
// "// " comment on a console.log line.
func runReadmeSDK(t *testing.T, where, state, src string) {
	t.Helper()
	node, modules, err := e2bsdk.Install(t.TempDir())
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
	srv := exec.Command(tentBin, "--state-dir", state, "serve", "--listen", "127.0.0.1:0")
	srv.Dir = t.TempDir()
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	}()
	// The server prints the variables to export, with the key's file.
	var env []string
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
		t.Fatalf("%s: tent serve printed no export line", where)
	}
	key, err := os.ReadFile(filepath.Join(state, "serve-api-key"))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for i, kv := range env {
		if strings.HasPrefix(kv, "E2B_API_KEY=") {
			env[i] = "E2B_API_KEY=" + strings.TrimSpace(string(key))
		}
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "example.mjs"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "example.mjs")
	cmd.Dir = work
	cmd.Env = append(append(os.Environ(), "E2B_DEBUG=", "E2B_DOMAIN="), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: node: %v\n%s\nwant output containing %q", where, err, out, want)
	}
}
