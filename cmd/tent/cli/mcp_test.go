package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
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

// TestMCPStdioMalformedLine: a line that is not JSON (or not JSON-RPC)
// on a real tent mcp's stdin is answered with the JSON-RPC error for it
// and the session goes on, its default sandbox too (the SDK's stdio
// transport ended the session, the process and the sandbox on it).
func TestMCPStdioMalformedLine(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(tentBin, "--state-dir", state, "mcp")
	cmd.Env = baseEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	out := bufio.NewScanner(outR)
	out.Buffer(nil, 1<<20)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatalf("writing %.40q: %v\n%s", line, err, stderr.String())
		}
	}
	next := func() map[string]any {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("no answer (%v); tent mcp's stderr:\n%s", out.Err(), stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", out.Text(), err)
		}
		return m
	}
	shell := func(id int) string {
		t.Helper()
		send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"shell","arguments":{"command":"echo ok"}}}`)
		m := next()
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		if m["id"] != float64(id) || sc["stdout"] != "ok\n" || sc["sandbox"] == "" {
			t.Fatalf("shell: %v\n%s", m, stderr.String())
		}
		return fmt.Sprint(sc["sandbox"])
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if m := next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	box := shell(2)
	for i, c := range []struct {
		line string
		code float64
		id   any
	}{
		{"this is not JSON", -32700, nil},
		{`{"jsonrpc":"2.0","id":3,"method":`, -32700, nil},
		{`{"id":4,"method":"ping"}`, -32600, float64(4)}, // no "jsonrpc":"2.0"
		{`[1,2]`, -32600, nil},
	} {
		send(c.line)
		m := next()
		e, _ := m["error"].(map[string]any)
		if id, ok := m["id"]; !ok || id != c.id || e["code"] != c.code {
			t.Errorf("%q: answered %v; want error %v with id %v", c.line, m, c.code, c.id)
		}
		if again := shell(10 + i); again != box {
			t.Errorf("after %q the default sandbox is %s, was %s", c.line, again, box)
		}
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("tent mcp after its stdin closed: %v\n%s", err, stderr.String())
	}
	if ls := tent(t, "--state-dir", state, "ls", "-q"); ls.stdout != "" {
		t.Errorf("sandboxes left after the session closed: %q", ls.stdout)
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
	cmd, url, tok := startMCPHTTP(t, state)
	token := []byte(tok)

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
	// A malformed body gets 400 with the JSON-RPC error for it; the
	// session goes on.
	for _, c := range []struct {
		body string
		code float64
		id   any
	}{
		{"this is not JSON", -32700, nil},
		{`{"id":7,"method":"ping"}`, -32600, float64(7)},
	} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set("Mcp-Session-Id", cs.ID())
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		derr := json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		e, _ := m["error"].(map[string]any)
		if id, ok := m["id"]; res.StatusCode != http.StatusBadRequest || derr != nil || !ok || id != c.id || e["code"] != c.code {
			t.Errorf("POST %q: %d %v (%v); want 400 with error %v, id %v", c.body, res.StatusCode, m, derr, c.code, c.id)
		}
		mcpCall(t, cs, "exec", map[string]any{"argv": []string{"echo", "over http"}}, &r)
		if r.Stdout != "over http\n" {
			t.Errorf("exec over HTTP after %q: %+v", c.body, r)
		}
	}
	// The client's cancellation, over HTTP, kills the command.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "exec sleep 62.25"}})
		done <- err
	}()
	sandboxtest.Eventually(t, "the command to start", func() bool { return processRuns("sleep", "62.25") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call over HTTP returned %v", err)
	}
	sandboxtest.AssertNoProcess(t, "sleep", "62.25")
	_ = cs.Close()
	stopMCP(t, cmd)
	if ls := tent(t, "--state-dir", state, "ls", "-q"); ls.stdout != "" {
		t.Errorf("sandboxes left after SIGTERM: %q", ls.stdout)
	}
}

// runReadmeMCPClients runs a README block of MCP client set-up lines
// (`claude mcp add NAME -- CMD...`): sh expands each line with claude
// and codex defined to print the server's argv, and each server is then
// driven as its client would (as root only, as the README's other
// shell blocks: its lines set limits).
func runReadmeMCPClients(t *testing.T, where, dir string, env []string, block string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("%s: not run: the README's commands set limits, which need root or a delegated cgroup", where)
		return
	}
	script := `add() { [ "$1" = mcp ] && [ "$2" = add ] || { echo "not CLIENT mcp add: $*" >&2; exit 1; }; shift 3
  [ "$1" = -- ] || { echo "no -- before the server's command" >&2; exit 1; }; shift; printf '%s\0' "$@"; echo; }
claude() { add "$@"; }
codex() { add "$@"; }
` + block
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		argv := strings.Split(strings.TrimSuffix(line, "\x00"), "\x00")
		driveReadmeServer(t, where, dir, env, argv)
		n++
	}
	if n != strings.Count(block, " mcp add ") {
		t.Errorf("%s: %d servers driven for %d lines", where, n, strings.Count(block, " mcp add "))
	}
}

// runReadmeMCPConfig drives each server of a README mcpServers block.
func runReadmeMCPConfig(t *testing.T, where, dir string, env []string, block string) {
	t.Helper()
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(block), &cfg); err != nil || len(cfg.MCPServers) == 0 {
		t.Fatalf("%s: an mcpServers block: %v", where, err)
	}
	for _, s := range cfg.MCPServers {
		driveReadmeServer(t, where, dir, env, append([]string{s.Command}, s.Args...))
	}
}

// driveReadmeServer starts argv (tent: this build) as a stdio MCP server,
// runs a command in its default sandbox, closes the session and checks
// that the sandbox is gone.
func driveReadmeServer(t *testing.T, where, dir string, env []string, argv []string) {
	t.Helper()
	if argv[0] != "tent" {
		t.Fatalf("%s: the server's command is %q, not tent", where, argv)
	}
	cmd := exec.Command(tentBin, argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs := mcpClient(t, &sdk.CommandTransport{Command: cmd})
	var r struct {
		Stdout  string `json:"stdout"`
		Sandbox string `json:"sandbox"`
	}
	mcpCall(t, cs, "shell", map[string]any{"command": "echo ok"}, &r)
	if r.Stdout != "ok\n" {
		t.Errorf("%s: %q: shell: %+v\n%s", where, argv, r, stderr.String())
	}
	if err := cs.Close(); err != nil {
		t.Errorf("%s: %q: %v\n%s", where, argv, err, stderr.String())
	}
	if ls := tent(t, append(stateArgs(env), "ls", "-q")...); strings.Contains(ls.stdout, r.Sandbox) {
		t.Errorf("%s: %q: sandbox %s left after the session", where, argv, r.Sandbox)
	}
}

// stateArgs names the state directory of env for tent.
func stateArgs(env []string) []string {
	for _, kv := range env {
		if d, ok := strings.CutPrefix(kv, "TENT_STATE_DIR="); ok {
			return []string{"--state-dir", d}
		}
	}
	return nil
}

// processRuns reports whether a process with exactly argv runs.
func processRuns(argv ...string) bool {
	want := strings.Join(argv, "\x00") + "\x00"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == want {
			return true
		}
	}
	return false
}
