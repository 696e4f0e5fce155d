package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// httpSession opens a session to url over Streamable HTTP, on its own
// connections; closing it closes them.
func httpSession(t *testing.T, url string) (*sdk.ClientSession, func()) {
	t.Helper()
	tr := &http.Transport{}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{"tok", tr}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, func() { _ = cs.Close(); tr.CloseIdleConnections() }
}

// callHTTP calls a tool that must succeed and decodes its output.
func callHTTP(t *testing.T, cs *sdk.ClientSession, name string, args, out any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s(%v): %v %v", name, args, err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", name, b, err)
	}
}

// TestBackgroundCommandOutlivesHTTPClient: a background command started
// over HTTP runs on after its client disconnected; a new session finds
// it by pid (and in process_list) and reads its output from offset 0;
// its pid is its pid inside the sandbox (the shell's $$, the sandbox's
// own process table's).
func TestBackgroundCommandOutlivesHTTPClient(t *testing.T) {
	local := sandboxtest.NewLocal(t, sandbox.LocalOptions{})
	srv, err := New(local, Options{Spec: sandbox.Spec{Identity: sandbox.Identity{Env: []string{"GORACE=atexit_sleep_ms=0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler("tok"))
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		sandboxtest.AssertNoProcess(t, "sleep", "600.75")
	})

	first, disconnect := httpSession(t, hs.URL)
	var p processView
	callHTTP(t, first, "process_start", map[string]any{"command": "echo pid $$; echo to stderr >&2; exec sleep 600.75"}, &p)
	disconnect()

	second, closeSecond := httpSession(t, hs.URL)
	defer closeSecond()
	var out processReadOut
	want := fmt.Sprintf("pid %d\nto stderr\n", p.Pid)
	sandboxtest.Eventually(t, "the output", func() bool {
		callHTTP(t, second, "process_read", map[string]any{"id": strconv.Itoa(p.Pid), "sandbox": p.Sandbox, "offset": 0, "wait_seconds": 5}, &out)
		return len(out.Output) >= len(want)
	})
	if p.Pid <= 1 || out.Output != want || !out.Running || out.ID != p.ID || out.Command != "echo pid $$; echo to stderr >&2; exec sleep 600.75" {
		t.Errorf("read from a new session after the first disconnected: %+v (started %+v)", out, p)
	}
	// Its output came before its exec of sleep: sh may still be on its
	// way there.
	sandboxtest.Eventually(t, "the command running after its client disconnected", func() bool { return processRuns("sleep", "600.75") })
	h, err := local.Open(context.Background(), p.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := h.Processes(context.Background())
	if err != nil || len(infos) != 1 || infos[0].Pid != p.Pid || !infos[0].Running {
		t.Errorf("the sandbox's processes: %+v, %v; want pid %d running", infos, err, p.Pid)
	}
	var list processListOut
	callHTTP(t, second, "process_list", nil, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != p.ID || list.Processes[0].Pid != p.Pid {
		t.Errorf("process_list from the new session: %+v", list)
	}
	var killed processView
	callHTTP(t, second, "process_kill", map[string]any{"id": p.ID}, &killed)
	if killed.Running || killed.ExitCode == nil || *killed.ExitCode != 137 || !strings.HasSuffix(killed.ID, ":"+strconv.Itoa(p.Pid)) {
		t.Errorf("process_kill from the new session: %+v", killed)
	}
}

// TestBackgroundCommandInput: stdin given at the start comes first, then
// process_write's text; close_stdin ends the input after its text, and
// a later write is refused; a pid unknown in the sandbox is refused.
func TestBackgroundCommandInput(t *testing.T) {
	e := start(t, sandbox.Spec{})
	var p processView
	e.ok("process_start", map[string]any{"command": "cat; echo end $?", "stdin": "first\n"}, &p)
	e.ok("process_write", map[string]any{"id": p.ID, "input": "second\n", "close_stdin": true}, nil)
	var out processReadOut
	sandboxtest.Eventually(t, "the command to end", func() bool {
		e.ok("process_read", map[string]any{"id": strconv.Itoa(p.Pid), "wait_seconds": 5}, &out)
		return !out.Running
	})
	if out.Output != "first\nsecond\nend 0\n" || out.ExitCode == nil || *out.ExitCode != 0 {
		t.Errorf("process_read: %+v", out)
	}
	e.fails("process_write", map[string]any{"id": p.ID, "input": "x"}, "has ended")
	e.ok("process_start", map[string]any{"command": "exec sleep 600.25"}, &p)
	e.ok("process_write", map[string]any{"id": p.ID, "input": "", "close_stdin": true}, nil)
	sandboxtest.Eventually(t, "the input to close", func() bool {
		res, err := e.call(context.Background(), "process_write", map[string]any{"id": p.ID, "input": "x"})
		return err == nil && res.IsError && strings.Contains(text(res), "already closed")
	})
	e.fails("process_read", map[string]any{"id": strconv.Itoa(p.Pid + 1000)}, "no background command", "process_list")
	e.ok("process_kill", map[string]any{"id": p.ID}, &p)
	sandboxtest.AssertNoProcess(t, "sleep", "600.25")
}
