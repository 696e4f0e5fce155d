package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeRefusals(t *testing.T) {
	state := t.TempDir()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0"}, "needs TLS"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--listen", "nonsense"}, "want HOST:PORT"},
		// A key on the command line is readable by every local user.
		{[]string{"serve", "--listen", "127.0.0.1:0", "--api-key", "e2b_0123abcd"}, "/proc/PID/cmdline"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--api-key-file", "nosuch"}, "--api-key-file"},
	} {
		cmd := exec.Command(tentBin, append([]string{"--state-dir", state}, c.args...)...)
		cmd.Dir = state
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitRefused || !strings.Contains(string(out), c.msg) {
			t.Errorf("tent %s: %v\n%s\nwant exit %d with %q", strings.Join(c.args, " "), err, out, exitRefused, c.msg)
		}
	}
	// A state directory others may write (or, for root, another user's)
	// is refused as every verb refuses it, and no key is written there.
	unsafe := filepath.Join(t.TempDir(), "unsafe")
	if err := os.Mkdir(unsafe, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(unsafe, 0o777)
	others := []string{unsafe}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(theirs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		others = append(others, theirs)
	}
	for _, dir := range others {
		out, err := exec.Command(tentBin, "--state-dir", dir, "serve", "--listen", "127.0.0.1:0").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitRefused || !strings.Contains(string(out), "unsafe state directory") {
			t.Errorf("tent serve with state directory %s: %v\n%s\nwant exit %d with %q", dir, err, out, exitRefused, "unsafe state directory")
		}
		if _, err := os.Lstat(filepath.Join(dir, "serve-api-key")); err == nil {
			t.Errorf("tent serve wrote its key into the unsafe state directory %s", dir)
		}
	}
}

// TestServeKeyOffTheCommandLine: the key comes from a private file or
// stdin, and is the one the server then wants.
func TestServeKeyOffTheCommandLine(t *testing.T) {
	key := "e2b_00112233445566778899aabbccddeeff00112233"
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{file, "-"} {
		cmd := exec.Command(tentBin, "--state-dir", filepath.Join(t.TempDir(), "state"), "serve", "--listen", "127.0.0.1:0", "--api-key-file", from)
		cmd.Stdin = strings.NewReader(key + "\n")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		url := ""
		for sc := bufio.NewScanner(stderr); url == "" && sc.Scan(); {
			if rest, ok := strings.CutPrefix(sc.Text(), "export E2B_API_URL="); ok {
				url, _, _ = strings.Cut(rest, " ")
			}
		}
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		for _, k := range []string{key, "e2b_ff"} {
			if url == "" {
				break
			}
			req, _ := http.NewRequest("GET", url+"/v2/sandboxes", nil)
			req.Header.Set("X-API-Key", k)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if want := map[bool]int{true: 200, false: 401}[k == key]; res.StatusCode != want {
				t.Errorf("--api-key-file %s, key %s: status %d, want %d", from, k, res.StatusCode, want)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil || url == "" {
			t.Errorf("tent serve --api-key-file %s: %v (url %q)", from, err, url)
		}
	}
	// A key file others may read is refused.
	_ = os.Chmod(file, 0o644)
	out, err := exec.Command(tentBin, "--state-dir", t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--api-key-file", file).CombinedOutput()
	if !strings.Contains(string(out), "others may read it") || err == nil {
		t.Errorf("a key file of mode 0644: %v\n%s", err, out)
	}
}

func TestServeStartsServesAndStops(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(tentBin, "--state-dir", state, "serve", "--listen", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	// The server says where it listens: one line to paste into a shell.
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	url := ""
	for url == "" && sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if rest, ok := strings.CutPrefix(sc.Text(), "export E2B_API_URL="); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
	}
	if url == "" {
		t.Fatalf("tent serve printed no export line:\n%s", log.String())
	}
	rest := make(chan string)
	go func() {
		b, _ := io.ReadAll(stderr)
		rest <- string(b)
	}()

	keyFile := filepath.Join(state, "serve-api-key")
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the generated key file: %v (mode %v)", err, fi.Mode().Perm())
	}
	key, _ := os.ReadFile(keyFile)
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", strings.TrimSpace(string(key)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	code, body := do("POST", "/v2/sandboxes", `{"timeout":60,"metadata":{"from":"cli-test"}}`)
	var created struct {
		SandboxID, EnvdAccessToken string
		Domain                     *string
	}
	if code != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.SandboxID == "" || created.EnvdAccessToken == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	// getHost's domain is the server's own loopback address.
	port := url[strings.LastIndex(url, ":")+1:]
	if created.Domain == nil || *created.Domain != "localhost:"+port {
		t.Errorf("domain: %v, want localhost:%s", created.Domain, port)
	}
	if code, body = do("GET", "/sandboxes/"+created.SandboxID, ""); code != http.StatusOK || !strings.Contains(string(body), `"from":"cli-test"`) {
		t.Fatalf("get: %d %s", code, body)
	}
	// Its sandboxes are the state directory's: tent ls and exec see the
	// server's, and the server sees tent create's.
	if r := tent(t, "--state-dir", state, "ls", "-q"); !strings.Contains(r.stdout, created.SandboxID) {
		t.Errorf("tent ls does not list the server's sandbox %s: %+v", created.SandboxID, r)
	}
	if r := tent(t, "--state-dir", state, "exec", created.SandboxID, "--", "echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("tent exec in the server's sandbox: %+v", r)
	}
	other := strings.TrimSpace(tent(t, "--state-dir", state, "create").stdout)
	if code, body = do("GET", "/sandboxes/"+other, ""); code != http.StatusOK {
		t.Errorf("the server does not see tent create's sandbox %s: %d %s", other, code, body)
	}
	// The ports of a sandbox the server did not create need a traffic
	// token, which only the API key's holder can get (none was asked).
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Host = "8000-" + other + ".localhost:" + port
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("a port of tent create's sandbox through the server: %v %v, want 403", res, err)
	} else {
		res.Body.Close()
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tent serve after SIGTERM: %v\n%s%s", err, log.String(), <-rest)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tent serve did not stop within 20 s of SIGTERM")
	}
	tail := <-rest
	if !strings.Contains(tail, "sandbox killed") || !strings.Contains(tail, "tent serve: stopping") {
		t.Errorf("the shutdown log does not say the sandbox was killed:\n%s", tail)
	}
	// The shutdown killed what the server made, not tent create's.
	if r := tent(t, "--state-dir", state, "ls", "-q"); strings.Contains(r.stdout, created.SandboxID) || !strings.Contains(r.stdout, other) {
		t.Errorf("tent ls after the server's shutdown: %q, want %s only", r.stdout, other)
	}
	tent(t, "--state-dir", state, "rm", other)
	b, err := os.ReadFile(filepath.Join(state, "serve-state.json"))
	if err != nil || strings.Contains(string(b), created.SandboxID) {
		t.Errorf("serve-state.json after a shutdown that killed everything: %v\n%s", err, b)
	}
}
