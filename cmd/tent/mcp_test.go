package main

import (
	"bufio"
	"context"
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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestMCPRefusals(t *testing.T) {
	state := t.TempDir()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"mcp", "--listen", "0.0.0.0:0"}, "needs TLS"},
		{[]string{"mcp", "--listen", "127.0.0.1:0", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"mcp", "--listen", "nonsense"}, "want HOST:PORT"},
		{[]string{"mcp", "--token", "t"}, "are for --listen"},
		{[]string{"mcp", "--net", "wifi"}, "unknown net mode"},
		{[]string{"mcp", "--ro", "/does/not/exist"}, "no such file"},
		{[]string{"mcp", "--templates", "/does/not/exist"}, "not a directory"},
	} {
		cmd := exec.Command(tentBin, append([]string{"--state-dir", state}, c.args...)...)
		cmd.Dir = state
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitRefused || !strings.Contains(string(out), c.msg) {
			t.Errorf("tent %s: %v\n%s\nwant exit %d with %q", strings.Join(c.args, " "), err, out, exitRefused, c.msg)
		}
	}
}

// mcpClient connects the Go SDK's client to t.
func mcpClient(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "tent-cli-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// mcpCall calls a tool that must succeed and decodes its output.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		t.Fatalf("%s: tool error %s", name, b)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %s: %v", name, b, err)
	}
}

// TestMCPStdio drives tent mcp as an agent's client starts it (over its
// stdin and stdout) with the operator's flags, on the supervised backend
// of a state directory: the sandbox has the operator's cow mount, tent
// ls sees it while the session lasts, and closing the session leaves no
// sandbox behind.
func TestMCPStdio(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	project := sandboxDir(t)
	if err := os.WriteFile(filepath.Join(project, "main.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // a root caller's cow source is written as its owner
		if err := os.Chown(filepath.Join(project, "main.txt"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tentBin, "--state-dir", state, "mcp", "--cow", project+":/work", "--workdir", "/work")
	cmd.Env = baseEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs := mcpClient(t, &sdk.CommandTransport{Command: cmd})
	var r struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Sandbox  string `json:"sandbox"`
	}
	mcpCall(t, cs, "shell", map[string]any{"command": "cat main.txt; pwd"}, &r)
	if r.ExitCode != 0 || r.Stdout != "hello\n/work\n" {
		t.Errorf("shell in the default sandbox: %+v\n%s", r, stderr.String())
	}
	var edited struct{ Replacements int }
	mcpCall(t, cs, "file_edit", map[string]any{"path": "main.txt", "old_string": "hello", "new_string": "bye"}, &edited)
	var rd struct{ Content string }
	mcpCall(t, cs, "file_read", map[string]any{"path": "/work/main.txt"}, &rd)
	if edited.Replacements != 1 || rd.Content != "bye\n" {
		t.Errorf("edit then read: %+v, %q", edited, rd.Content)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "main.txt")); string(b) != "hello\n" {
		t.Errorf("a cow mount's host file changed: %q", b)
	}
	if ls := tent(t, "--state-dir", state, "ls", "-q"); !strings.Contains(ls.stdout, r.Sandbox) {
		t.Errorf("tent ls does not show the server's sandbox %s: %+v", r.Sandbox, ls)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("closing the session: %v\n%s", err, stderr.String())
	}
	if ls := tent(t, "--state-dir", state, "ls", "-q"); ls.stdout != "" {
		t.Errorf("sandboxes left after the session closed: %q\n%s", ls.stdout, stderr.String())
	}
}

// bearer adds a bearer token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTP serves tent mcp over Streamable HTTP: without the token a
// request gets 401; with it (from the state directory's token file)
// the SDK's client runs a command; SIGTERM stops the server and kills
// its sandboxes.
func TestMCPHTTP(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(tentBin, "--state-dir", state, "mcp", "--listen", "127.0.0.1:0")
	cmd.Env = baseEnv()
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
	sc := bufio.NewScanner(stderr)
	url := ""
	var log strings.Builder
	for url == "" && sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if _, rest, ok := strings.Cut(sc.Text(), "tent mcp: listening on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
	}
	if url == "" {
		t.Fatalf("tent mcp printed no address:\n%s", log.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	fi, err := os.Stat(filepath.Join(state, "mcp-token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the generated token file: %v", err)
	}
	token, _ := os.ReadFile(filepath.Join(state, "mcp-token"))

	for _, auth := range []string{"", "Bearer wrong", "Basic " + strings.TrimSpace(string(token))} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, res.StatusCode)
		}
	}
	cs := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearer{strings.TrimSpace(string(token))}}})
	var r struct {
		Stdout  string `json:"stdout"`
		Sandbox string `json:"sandbox"`
	}
	mcpCall(t, cs, "exec", map[string]any{"argv": []string{"echo", "over http"}}, &r)
	if r.Stdout != "over http\n" {
		t.Errorf("exec over HTTP: %+v", r)
	}
	_ = cs.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tent mcp after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("tent mcp did not stop within 30 s of SIGTERM")
	}
	if ls := tent(t, "--state-dir", state, "ls", "-q"); ls.stdout != "" {
		t.Errorf("sandboxes left after SIGTERM: %q", ls.stdout)
	}
}
