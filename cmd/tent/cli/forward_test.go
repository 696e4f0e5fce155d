package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerForwarding: tent serve and tent mcp are tent-server's, run
// with tent's whole command line (global flags included); without a
// tent-server beside tent or on $PATH, tent says what to install.
func TestServerForwarding(t *testing.T) {
	r := tent(t, "serve", "--help")
	r.expect(t, 0)
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("tent and tent-server of one build: %q", r.stderr)
	}
	for _, flag := range []string{"--listen", "--api-key-file", "--domain"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("tent serve --help does not list %s (tent-server's help):\n%s", flag, r.stdout)
		}
	}
	// The global flags before the verb reach tent-server: it makes the
	// state directory, then refuses the missing key file.
	state := filepath.Join(t.TempDir(), "sub", "state")
	r = tent(t, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--api-key-file", filepath.Join(state, "missing"))
	r.expect(t, 125, "tent: --api-key-file: ")
	if fi, err := os.Stat(state); err != nil || !fi.IsDir() {
		t.Errorf("tent-server did not get --state-dir %s: %v", state, err)
	}

	// tent alone in a directory.
	alone := filepath.Join(t.TempDir(), "tent")
	copyFile(t, tentBin, alone)
	noServer := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}
	for _, verb := range []string{"serve", "mcp"} {
		r = invocation{args: []string{verb}, base: noServer, bin: alone}.run(t)
		r.expect(t, 125, "tent: tent serve and tent mcp are served by tent-server, which is neither beside this tent nor on $PATH: install it")
	}
	// A tent-server run by a tent of another build says so (of the same
	// build, as above, it does not).
	server := filepath.Join(filepath.Dir(tentBin), ServerBinary)
	r = invocation{args: []string{"mcp", "--help"}, env: []string{forwardedEnv + "=v0.0.1 go1.0"}, bin: server}.run(t)
	r.expect(t, 0, "tent: warning: tent-server is ", ", the tent that ran it v0.0.1 go1.0: install both from one build")

	// ... with tent-server on $PATH.
	onPath := []string{"PATH=" + filepath.Dir(tentBin) + ":/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}
	r = invocation{args: []string{"mcp", "--help"}, base: onPath, bin: alone}.run(t)
	r.expect(t, 0)
	if !strings.Contains(r.stdout, "--templates") {
		t.Errorf("tent mcp --help through $PATH's tent-server:\n%s", r.stdout)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
