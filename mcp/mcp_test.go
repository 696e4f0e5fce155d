package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// The test binary is the sandboxes' init too (the Local backend
// re-executes it).
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(sandboxtest.Run(m))
}

// env is one MCP session over an in-memory transport, through the Go
// SDK's client, to a Server on a Local backend.
type env struct {
	t        *testing.T
	local    *sandbox.Local
	srv      *Server
	cs       *sdk.ClientSession
	progress atomic.Int32
}

// start serves spec; everything ends with the test, which then checks
// that no sandbox is left.
func start(t *testing.T, spec sandbox.Spec) *env {
	t.Helper()
	e := &env{t: t, local: sandboxtest.NewLocal(t, sandbox.LocalOptions{})}
	// The file helper is this test binary re-executed in the sandbox;
	// built with -race, it would sleep a second at exit (the race
	// runtime's atexit_sleep_ms), a second per file tool call.
	spec.Env = append(spec.Env, "GORACE=atexit_sleep_ms=0")
	var err error
	if e.srv, err = New(e.local, Options{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	_, err = e.srv.MCPServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "tent-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { e.progress.Add(1) },
	})
	if e.cs, err = client.Connect(ctx, ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	return e
}

// close ends the session and the server, and checks that every sandbox
// the server made is gone, processes and cgroups too.
func (e *env) close() {
	t := e.t
	ctx := context.Background()
	infos, _ := e.local.List(ctx)
	_ = e.cs.Close()
	if err := e.srv.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if left, err := e.local.List(ctx); err != nil || len(left) != 0 {
		t.Errorf("sandboxes left after Close: %v, %v", left, err)
	}
	for _, i := range infos {
		sandboxtest.AssertGone(t, i)
	}
}

// call calls a tool and returns its result (tool errors included).
func (e *env) call(ctx context.Context, name string, args any) (*sdk.CallToolResult, error) {
	return e.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
}

// ok calls a tool that must succeed and decodes its structured output.
func (e *env) ok(name string, args any, out any) {
	e.t.Helper()
	res, err := e.call(context.Background(), name, args)
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		e.t.Fatalf("%s(%v): tool error: %s", name, args, text(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s: decoding %s: %v", name, b, err)
		}
	}
}

// fails calls a tool that must fail as a tool error whose text holds
// every one of want.
func (e *env) fails(name string, args any, want ...string) string {
	e.t.Helper()
	res, err := e.call(context.Background(), name, args)
	if err != nil {
		e.t.Fatalf("%s: a protocol error instead of a tool error: %v", name, err)
	}
	msg := text(res)
	if !res.IsError {
		e.t.Fatalf("%s(%v) succeeded, want an error containing %q: %s", name, args, want, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			e.t.Errorf("%s(%v): error %q does not say %q", name, args, msg, w)
		}
	}
	return msg
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type execResult struct {
	Sandbox         string `json:"sandbox"`
	ExitCode        int    `json:"exit_code"`
	TimedOut        bool   `json:"timed_out"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	NetworkDenied   []struct {
		Host, Reason string
	} `json:"network_denied"`
}

func (e *env) shell(command string) execResult {
	e.t.Helper()
	var r execResult
	e.ok("shell", map[string]any{"command": command}, &r)
	return r
}

// TestSession is an agent's session through the Go SDK's client:
// initialize, list tools, create, run, edit a file and read it back,
// grep, a timeout, a denied fetch, cancel, snapshots, close.
func TestSession(t *testing.T) {
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{{Source: probe, Target: sandboxtest.ProbeTarget}},
		},
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"allowed.test"}},
		},
	}
	e := start(t, spec)
	ctx := context.Background()

	// Every tool is described, with input and output schemas.
	tools, err := e.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s: description, input or output schema missing", tl.Name)
		}
	}
	for _, want := range []string{"sandbox_create", "sandbox_list", "sandbox_inspect", "sandbox_kill", "exec", "shell",
		"process_start", "process_read", "process_write", "process_kill", "process_list",
		"file_read", "file_write", "file_edit", "file_list", "file_find", "file_grep", "file_stat", "file_mkdir", "file_remove", "file_move",
		"snapshot_create", "sandbox_fork", "sandbox_restore", "network_status"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s among %v", want, names)
		}
	}

	// A second sandbox on request; the default one on first use.
	var second sandboxView
	e.ok("sandbox_create", map[string]any{"name": "second"}, &second)
	r := e.shell("echo hi; echo oops >&2; exit 3")
	if r.ExitCode != 3 || r.Stdout != "hi\n" || r.Stderr != "oops\n" || r.Sandbox == second.ID {
		t.Errorf("shell: %+v", r)
	}
	var list listOut
	e.ok("sandbox_list", nil, &list)
	if len(list.Sandboxes) != 2 || !list.Sandboxes[1].Default || list.Sandboxes[0].Name != "second" {
		t.Errorf("sandbox_list: %+v", list)
	}
	e.ok("exec", map[string]any{"argv": []string{"sh", "-c", "cat; echo $FOO; pwd"}, "cwd": "/tmp", "env": map[string]string{"FOO": "bar"},
		"stdin": "input\n", "sandbox": "second"}, &r)
	if r.Stdout != "input\nbar\n/tmp\n" || r.Sandbox != second.ID {
		t.Errorf("exec with cwd, env, stdin in the second sandbox: %+v", r)
	}

	// Write, edit, read back, grep.
	e.ok("file_write", map[string]any{"path": "/tmp/src/main.py", "content": "def f():\n    return 1\n\nprint(f())\nprint(f())\n"}, nil)
	e.ok("file_edit", map[string]any{"path": "/tmp/src/main.py", "old_string": "return 1", "new_string": "return 42"}, nil)
	e.fails("file_edit", map[string]any{"path": "/tmp/src/main.py", "old_string": "print(f())", "new_string": "x"}, "occurs 2 times", "lines 4, 5", "unchanged")
	e.fails("file_edit", map[string]any{"path": "/tmp/src/main.py", "old_string": "return 7", "new_string": "x"}, "does not occur", "unchanged")
	var rd readOut
	e.ok("file_read", map[string]any{"path": "/tmp/src/main.py"}, &rd)
	if rd.Content != "def f():\n    return 42\n\nprint(f())\nprint(f())\n" || rd.EndLine != 5 || rd.More {
		t.Errorf("file_read after the edits: %+v", rd)
	}
	e.ok("file_read", map[string]any{"path": "/tmp/src/main.py", "offset": 2, "limit": 1}, &rd)
	if rd.Content != "    return 42\n" || rd.StartLine != 2 || rd.EndLine != 2 || !rd.More {
		t.Errorf("file_read of line 2: %+v", rd)
	}
	if r := e.shell("python3 /tmp/src/main.py 2>/dev/null || sed -n 2p /tmp/src/main.py"); !strings.Contains(r.Stdout, "42") {
		t.Errorf("the edit is not what the sandbox sees: %+v", r)
	}
	var g grepOut
	e.ok("file_grep", map[string]any{"pattern": `print\(`, "path": "/tmp"}, &g)
	if len(g.Matches) != 2 || g.Matches[0] != (grepMatch{Path: "/tmp/src/main.py", Line: 4, Text: "print(f())"}) || g.Matches[1].Line != 5 {
		t.Errorf("file_grep: %+v", g)
	}
	var found listFilesOut
	e.ok("file_find", map[string]any{"pattern": "*.py", "path": "/tmp"}, &found)
	if len(found.Entries) != 1 || found.Entries[0].Path != "/tmp/src/main.py" || found.Entries[0].Type != "file" {
		t.Errorf("file_find: %+v", found)
	}
	e.ok("file_find", map[string]any{"pattern": "src/*.py", "path": "/tmp/"}, &found)
	if len(found.Entries) != 1 || found.Entries[0].Path != "/tmp/src/main.py" {
		t.Errorf("file_find of a relative path: %+v", found)
	}
	e.ok("file_find", map[string]any{"pattern": "src", "path": "/tmp", "type": "file"}, &found)
	if len(found.Entries) != 0 {
		t.Errorf("file_find of files named src: %+v", found)
	}
	e.ok("file_move", map[string]any{"from": "/tmp/src/main.py", "to": "/tmp/dst/app.py"}, nil)
	e.ok("file_mkdir", map[string]any{"path": "/tmp/dst/sub"}, nil)
	e.ok("file_mkdir", map[string]any{"path": "/tmp/dst/sub"}, nil) // exists: fine
	e.ok("file_list", map[string]any{"path": "/tmp/dst", "depth": 2}, &found)
	if len(found.Entries) != 2 {
		t.Errorf("file_list: %+v", found)
	}
	e.fails("file_remove", map[string]any{"path": "/tmp/dst"}, "not empty", "recursive")
	e.ok("file_remove", map[string]any{"path": "/tmp/dst", "recursive": true}, nil)
	e.fails("file_stat", map[string]any{"path": "/tmp/dst"}, "no such file", "file_list")

	// A command that times out is killed and says so.
	e.ok("shell", map[string]any{"command": "sleep 30", "timeout_seconds": 0.5}, &r)
	if !r.TimedOut || r.ExitCode != 124 {
		t.Errorf("a timed-out command: %+v", r)
	}

	// A denied fetch: the command sees a 403 with the reason, the result
	// lists the denial, and network_status keeps it.
	e.ok("exec", map[string]any{"argv": []string{sandboxtest.ProbeTarget + "/testprobe", "fetch", "http://denied.test/"}}, &r)
	if !strings.HasPrefix(r.Stdout, "403 ") || len(r.NetworkDenied) != 1 || r.NetworkDenied[0].Host != "denied.test" {
		t.Errorf("a denied fetch: %+v", r)
	}
	var ns networkOut
	e.ok("network_status", nil, &ns)
	if ns.Mode != "limited" || !slices.Equal(ns.AllowedHosts, []string{"allowed.test"}) || len(ns.Denied) != 1 ||
		ns.Denied[0].Host != "denied.test" || ns.Denied[0].Reason == "" {
		t.Errorf("network_status: %+v", ns)
	}

	// Progress while a command runs; the client's cancellation kills it.
	params := &sdk.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "sleep 2.5"}}
	params.SetProgressToken("p1")
	if _, err := e.cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	if e.progress.Load() == 0 {
		t.Error("no progress notification during a 2.5 s command")
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.call(cctx, "shell", map[string]any{"command": "exec sleep 61.25"})
		done <- err
	}()
	sandboxtest.Eventually(t, "the command to start", func() bool { return processRuns("sleep", "61.25") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call returned %v", err)
	}
	sandboxtest.AssertNoProcess(t, "sleep", "61.25")

	// Snapshot, change, restore; a fork is a copy.
	e.ok("file_write", map[string]any{"path": "/tmp/state", "content": "v1"}, nil)
	var snap snapshotOut
	e.ok("snapshot_create", nil, &snap)
	e.ok("file_write", map[string]any{"path": "/tmp/state", "content": "v2"}, nil)
	var restored restoreOut
	e.ok("sandbox_restore", map[string]any{"snapshot": snap.Snapshot}, &restored)
	e.ok("file_read", map[string]any{"path": "/tmp/state"}, &rd)
	if rd.Content != "v1" || !restored.Default || restored.Replaced == restored.ID {
		t.Errorf("after restore: %q, %+v", rd.Content, restored)
	}
	var fork sandboxView
	e.ok("sandbox_fork", map[string]any{"snapshot": snap.Snapshot, "name": "copy"}, &fork)
	e.ok("file_read", map[string]any{"path": "/tmp/state", "sandbox": "copy"}, &rd)
	if rd.Content != "v1" || fork.Network != "limited" {
		t.Errorf("the fork: %q, %+v", rd.Content, fork)
	}
	e.fails("sandbox_fork", map[string]any{"snapshot": "0123456789abcdef"}, "only snapshots from snapshot_create")

	var killed killOut
	e.ok("sandbox_kill", map[string]any{"sandbox": "copy"}, &killed)
	e.fails("sandbox_inspect", map[string]any{"sandbox": "copy"}, "sandbox_list")
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

// TestBackgroundCommand starts a command, talks to it and reads it out.
func TestBackgroundCommand(t *testing.T) {
	e := start(t, sandbox.Spec{})
	var p processView
	e.ok("process_start", map[string]any{"command": "read x; echo got $x; echo err >&2; exit 5"}, &p)
	if !p.Running || p.ID == "" {
		t.Fatalf("process_start: %+v", p)
	}
	e.ok("process_write", map[string]any{"id": p.ID, "input": "hello\n"}, nil)
	var out processReadOut
	deadline := time.Now().Add(30 * time.Second)
	for out.Running || out.ID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the command never ended: %+v", out)
		}
		e.ok("process_read", map[string]any{"id": p.ID, "wait_seconds": 5}, &out)
	}
	if out.Output != "got hello\nerr\n" || out.ExitCode == nil || *out.ExitCode != 5 || out.NextOffset != int64(len(out.Output)) {
		t.Errorf("process_read: %+v", out)
	}
	e.ok("process_read", map[string]any{"id": p.ID, "offset": out.NextOffset}, &out)
	if out.Output != "" {
		t.Errorf("read past the end: %q", out.Output)
	}
	e.fails("process_write", map[string]any{"id": p.ID, "input": "x"}, "has ended")
	e.fails("process_read", map[string]any{"id": "p999"}, "process_list")
}

// TestNoGoroutineLeft: a session with a command, a background command
// still running and file tools, then Close: every goroutine the server,
// the SDK and the backend started for it ends.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(local, Options{Spec: sandbox.Spec{Identity: sandbox.Identity{Env: []string{"GORACE=atexit_sleep_ms=0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	if _, err := srv.MCPServer().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, local: local, srv: srv, cs: cs}
	e.shell("echo hi")
	var p processView
	e.ok("process_start", map[string]any{"command": "cat"}, &p) // reads its stdin forever
	e.ok("process_write", map[string]any{"id": p.ID, "input": "x\n"}, nil)
	e.ok("file_write", map[string]any{"path": "/tmp/a", "content": "a\n"}, nil)
	e.ok("file_grep", map[string]any{"pattern": "a", "path": "/tmp"}, nil)
	_ = cs.Close()
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := local.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left of %d:\n%s", n-before, n, buf[:runtime.Stack(buf, true)])
	}
}
