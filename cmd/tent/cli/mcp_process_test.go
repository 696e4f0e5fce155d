package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
)

// startMCPHTTP starts tent mcp over Streamable HTTP with state as its
// state directory and returns it, its URL and its token (checked to be
// in a 0600 file there).
func startMCPHTTP(t *testing.T, state string) (*exec.Cmd, string, string) {
	t.Helper()
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
	return cmd, url, strings.TrimSpace(string(token))
}

// stopMCP stops tent mcp with SIGTERM and waits for it (30 s at most).
func stopMCP(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
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
}

// TestMCPHTTPBackgroundCommand: a background command started over HTTP
// runs on after its client disconnected (the sandbox's supervisor owns
// it); a new session finds it by pid and reads its output from offset 0;
// its pid is the one tent ps shows (its pid inside the sandbox).
func TestMCPHTTPBackgroundCommand(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cmd, url, token := startMCPHTTP(t, state)
	session := func() (*sdk.ClientSession, func()) {
		tr := &http.Transport{}
		cs := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: bearerOn{token, tr}}})
		return cs, func() { _ = cs.Close(); tr.CloseIdleConnections() }
	}
	first, disconnect := session()
	var p struct {
		ID      string `json:"id"`
		Pid     int    `json:"pid"`
		Sandbox string `json:"sandbox"`
	}
	mcpCall(t, first, "process_start", map[string]any{"command": "echo pid $$; echo err >&2; exec sleep 64.25"}, &p)
	disconnect()

	second, closeSecond := session()
	var out struct {
		Output     string `json:"output"`
		Running    bool   `json:"running"`
		NextOffset int64  `json:"next_offset"`
	}
	want := fmt.Sprintf("pid %d\nerr\n", p.Pid)
	sandboxtest.Eventually(t, "the output", func() bool {
		mcpCall(t, second, "process_read", map[string]any{"id": strconv.Itoa(p.Pid), "sandbox": p.Sandbox, "wait_seconds": 5}, &out)
		return len(out.Output) >= len(want)
	})
	if p.Pid <= 1 || out.Output != want || !out.Running || !processRuns("sleep", "64.25") {
		t.Errorf("read from a new session after the first disconnected: %+v (started %+v)", out, p)
	}
	var procs []struct {
		Pid     int  `json:"pid"`
		Running bool `json:"running"`
	}
	if err := json.Unmarshal([]byte(tent(t, "--state-dir", state, "ps", "-o", "json", p.Sandbox).stdout), &procs); err != nil ||
		len(procs) != 1 || procs[0].Pid != p.Pid || !procs[0].Running {
		t.Errorf("tent ps: %+v, %v; want pid %d running", procs, err, p.Pid)
	}
	closeSecond()
	stopMCP(t, cmd)
	sandboxtest.AssertNoProcess(t, "sleep", "64.25")
}

// bearerOn adds a bearer token to every request sent through rt.
type bearerOn struct {
	token string
	rt    http.RoundTripper
}

func (b bearerOn) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
