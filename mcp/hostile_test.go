package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// TestHostilePaths: every file tool acts inside the sandbox. "..", NUL
// and symlinks the sandbox plants never reach a host file it cannot.
func TestHostilePaths(t *testing.T) {
	e := start(t, sandbox.Spec{})
	secretDir := t.TempDir() // on the host, mounted nowhere
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostTmp := filepath.Join(os.TempDir(), fmt.Sprintf("tent-mcp-escape-%d", time.Now().UnixNano()))

	e.fails("file_read", map[string]any{"path": "/tmp/a\x00b"}, "NUL")
	e.fails("file_write", map[string]any{"path": "a\x00", "content": "x"}, "NUL")
	e.fails("exec", map[string]any{"argv": []string{"echo", "a\x00b"}}, "NUL")
	e.fails("file_read", map[string]any{"path": ""}, "path is empty")

	// ".." climbs to the sandbox's root, never the host's.
	e.ok("file_write", map[string]any{"path": "../../../../.." + hostTmp, "content": "inside"}, nil)
	if _, err := os.Lstat(hostTmp); !errors.Is(err, fs.ErrNotExist) {
		os.Remove(hostTmp)
		t.Fatalf("a write through .. reached the host's %s (%v)", hostTmp, err)
	}
	if r := e.shell("cat " + hostTmp); r.Stdout != "inside" {
		t.Errorf("the write through .. is not in the sandbox: %+v", r)
	}

	// Symlinks planted by the sandbox resolve inside it: the host's
	// secret directory does not exist there.
	e.shell(fmt.Sprintf("ln -s %s /tmp/link && ln -s %s /tmp/dirlink && ln -s /proc/1/root/etc /tmp/etc", secret, secretDir))
	e.fails("file_read", map[string]any{"path": "/tmp/link"}, "no such file")
	e.fails("file_edit", map[string]any{"path": "/tmp/link", "old_string": "host", "new_string": "x"}, "no such file")
	e.fails("file_write", map[string]any{"path": "/tmp/dirlink/planted", "content": "x"})
	if _, err := os.Lstat(filepath.Join(secretDir, "planted")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a write through a planted symlink reached the host: %v", err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret\n" {
		t.Errorf("the host's file changed: %q", b)
	}
	var st fileView
	e.ok("file_stat", map[string]any{"path": "/tmp/link"}, &st)
	if st.Type != "symlink" || st.LinkTarget != secret {
		t.Errorf("file_stat of a symlink: %+v", st)
	}
	var g grepOut
	e.ok("file_grep", map[string]any{"pattern": "secret", "path": "/tmp"}, &g)
	if len(g.Matches) != 0 {
		t.Errorf("grep followed a symlink out: %+v", g)
	}
	// FIFOs and devices, directly or through a planted symlink, never
	// block a tool and never feed it without bound.
	e.shell("mkfifo /tmp/fifo && ln -s /tmp/fifo /tmp/fifolink && ln -s /dev/zero /tmp/zero && ln -s /dev/urandom /tmp/random")
	e.fails("file_read", map[string]any{"path": "/tmp/fifo"}, "not a regular file")
	e.fails("file_read", map[string]any{"path": "/tmp/fifolink"}, "not a regular file")
	e.fails("file_edit", map[string]any{"path": "/tmp/fifolink", "old_string": "a", "new_string": "b"}, "not a regular file")
	e.fails("file_read", map[string]any{"path": "/tmp/zero"}, "not a regular file")
	e.fails("file_edit", map[string]any{"path": "/tmp/random", "old_string": "a", "new_string": "b"}, "not a regular file")
	var l listFilesOut
	e.ok("file_list", map[string]any{"path": "/tmp", "depth": 5}, &l)
	for _, en := range l.Entries {
		if strings.HasPrefix(en.Path, "/tmp/dirlink/") || strings.HasPrefix(en.Path, "/tmp/etc/") {
			t.Errorf("file_list followed a symlink: %+v", en)
		}
	}
}

// TestHostileSizes: huge outputs, files and trees come back bounded,
// with the truncation said.
func TestHostileSizes(t *testing.T) {
	e := start(t, sandbox.Spec{})
	var r execResult
	e.ok("shell", map[string]any{"command": "head -c 5000000 /dev/zero | tr '\\0' a; echo END"}, &r)
	if r.StdoutBytes != 5000004 || !r.StdoutTruncated || len(r.Stdout) > defaultOutput+200 ||
		!strings.HasSuffix(r.Stdout, "aaaaEND\n") || !strings.Contains(r.Stdout, "bytes cut") {
		t.Errorf("5 MB of output: %d bytes returned, %d counted, truncated %v, tail %q", len(r.Stdout), r.StdoutBytes, r.StdoutTruncated, r.Stdout[max(0, len(r.Stdout)-20):])
	}
	e.fails("shell", map[string]any{"command": "true", "max_output_bytes": 1 << 30}, "at most")

	// A file of short lines past grep's 4 MiB, a line past file_read's
	// 256 KiB, a binary file, and a sparse file past file_edit's 10 MiB.
	home := strings.TrimSpace(e.shell("seq 1 700000 > /tmp/big; head -c 300000 /dev/zero | tr '\\0' b > /tmp/oneline; printf 'x\\0y' > /tmp/bin; truncate -s 11M $HOME/sparse; echo $HOME").Stdout)
	var rd readOut
	e.ok("file_read", map[string]any{"path": "/tmp/big", "offset": 1000, "limit": 3}, &rd)
	if rd.Content != "1000\n1001\n1002\n" || !rd.More {
		t.Errorf("lines 1000-1002 of a big file: %+v", rd)
	}
	e.ok("file_read", map[string]any{"path": "/tmp/big", "limit": 1000000}, &rd)
	if len(rd.Content) > maxReadBytes || !rd.Truncated || !rd.More {
		t.Errorf("a big read: %d bytes, truncated %v", len(rd.Content), rd.Truncated)
	}
	e.ok("file_read", map[string]any{"path": "/tmp/oneline"}, &rd)
	if len(rd.Content) != maxReadBytes || !rd.Truncated {
		t.Errorf("a 300 KB line: %d bytes, truncated %v", len(rd.Content), rd.Truncated)
	}
	e.fails("file_read", map[string]any{"path": "/tmp/bin"}, "binary")
	e.fails("file_edit", map[string]any{"path": home + "/sparse", "old_string": "b", "new_string": "c"}, "more than")
	e.fails("file_write", map[string]any{"path": "/tmp/huge", "content": strings.Repeat("x", maxWholeFile+1)}, "more than")
	var g grepOut
	e.ok("file_grep", map[string]any{"pattern": "^699999$", "path": "/tmp"}, &g)
	if len(g.Matches) != 0 || len(g.Skipped) != 2 || g.FilesScanned != 1 {
		t.Errorf("grep over files past its bound: %+v", g)
	}
	e.shell("mkdir -p /tmp/many && cd /tmp/many && for i in $(seq 1 1200); do echo match > f$i; done")
	e.ok("file_grep", map[string]any{"pattern": "match", "path": "/tmp/many"}, &g)
	if len(g.Matches) != defaultMatches || !g.Truncated {
		t.Errorf("grep over 1200 matches: %d, truncated %v", len(g.Matches), g.Truncated)
	}
	var l listFilesOut
	e.ok("file_list", map[string]any{"path": "/tmp/many"}, &l)
	if len(l.Entries) != maxEntries || !l.Truncated {
		t.Errorf("a list of 1200 files: %d, truncated %v", len(l.Entries), l.Truncated)
	}
}

// TestThousandBackgroundCommands: at most MaxProcesses run at once; the
// rest are refused with what to do, and nothing outlives a kill.
func TestThousandBackgroundCommands(t *testing.T) {
	e := start(t, sandbox.Spec{})
	started, refused := 0, 0
	var ids []string
	for i := range 1000 {
		res, err := e.call(context.Background(), "process_start", map[string]any{"command": "exec sleep 600.5"})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			if !strings.Contains(text(res), "process_kill one") {
				t.Fatalf("start %d refused without saying what to do: %s", i, text(res))
			}
			refused++
			continue
		}
		started++
		var p processView
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &p)
		ids = append(ids, p.ID)
	}
	if started != MaxProcesses || refused != 1000-MaxProcesses {
		t.Errorf("%d started, %d refused; want %d and the rest", started, refused, MaxProcesses)
	}
	// A huge unread input is refused, not buffered.
	e.ok("process_write", map[string]any{"id": ids[0], "input": strings.Repeat("x", maxInputPending)}, nil)
	e.fails("process_write", map[string]any{"id": ids[0], "input": strings.Repeat("x", maxInputPending)}, "not reading its input")
	for _, id := range ids {
		var p processView
		e.ok("process_kill", map[string]any{"id": id}, &p)
		if p.Running || p.ExitCode == nil || *p.ExitCode != 137 {
			t.Errorf("after process_kill: %+v", p)
		}
	}
	sandboxtest.AssertNoProcess(t, "sleep", "600.5")
	var p processView
	e.ok("process_start", map[string]any{"command": "yes"}, &p) // floods its buffer
	var out processReadOut
	e.ok("process_read", map[string]any{"id": p.ID, "offset": 0, "wait_seconds": 5}, &out)
	sandboxtest.Eventually(t, "yes to write past the buffer", func() bool {
		e.ok("process_read", map[string]any{"id": p.ID, "offset": 0, "max_bytes": 10}, &out)
		return out.Dropped > 0
	})
	if len(out.Output) != 10 || out.NextOffset != out.Dropped+10 {
		t.Errorf("a read of a flooded buffer: %d bytes, next %d, dropped %d", len(out.Output), out.NextOffset, out.Dropped)
	}
	// The server's Close (in cleanup) kills "yes".
}

// TestWideningRefused: a tool call asking for a host mount, a wider
// network or more resources is refused with the reason; nothing is
// created.
func TestWideningRefused(t *testing.T) {
	e := start(t, sandbox.Spec{})
	e.fails("sandbox_create", map[string]any{"mounts": []string{"/:/host"}}, "no tool mounts a host path")
	e.fails("sandbox_create", map[string]any{"network": "host"}, "network policy is fixed")
	e.fails("sandbox_create", map[string]any{"allow_hosts": []string{"*"}}, "network policy is fixed")
	e.fails("sandbox_create", map[string]any{"memory": "100G"}, "limits are fixed")
	e.fails("exec", map[string]any{"argv": []string{"true"}, "privileged": true}, "never privileged")
	e.fails("shell", map[string]any{"command": "true", "bogus": 1}, "unknown argument", "command")
	e.fails("sandbox_create", map[string]any{"template": "../../etc/passwd"}, "template name")
	e.fails("sandbox_create", map[string]any{"template": "wide"}, "no template")
	if l, _ := e.local.List(context.Background()); len(l) != 0 {
		t.Errorf("refusals created sandboxes: %v", l)
	}
	var ns networkOut
	e.ok("network_status", nil, &ns)
	if ns.Mode != "none" || !strings.Contains(ns.Advice, "no network") {
		t.Errorf("network_status: %+v", ns)
	}
	// Concurrent creates never pass the bound.
	var wg sync.WaitGroup
	var made, refused atomic.Int32
	for range MaxSandboxes + 4 {
		wg.Go(func() {
			res, err := e.call(context.Background(), "sandbox_create", nil)
			switch {
			case err != nil:
				t.Error(err)
			case res.IsError && strings.Contains(text(res), "sandbox_kill one first"):
				refused.Add(1)
			case !res.IsError:
				made.Add(1)
			default:
				t.Errorf("sandbox_create: %s", text(res))
			}
		})
	}
	wg.Wait()
	if made.Load() != MaxSandboxes-1 || refused.Load() != 5 {
		t.Errorf("%d concurrent creates made %d sandboxes and refused %d; want %d and 5", MaxSandboxes+4, made.Load(), refused.Load(), MaxSandboxes-1)
	}
	if l, _ := e.local.List(context.Background()); len(l) != MaxSandboxes {
		t.Errorf("%d sandboxes, want %d", len(l), MaxSandboxes)
	}
}

// TestMalformedJSONRPC writes broken and hostile messages to a server
// over a stream, as a client could: each gets a JSON-RPC error or is
// ignored, the server keeps serving, and nothing is created.
func TestMalformedJSONRPC(t *testing.T) {
	local := sandboxtest.NewLocal(t, sandbox.LocalOptions{})
	srv, err := New(local, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := srv.Run(ctx, &StdioTransport{Reader: inR, Writer: outW, MaxLine: 4096})
		outW.Close() // a session that ends early fails next rather than hangs
		done <- err
	}()
	answers := bufio.NewScanner(outR)
	answers.Buffer(nil, 1<<20)
	send := func(line string) { fmt.Fprintln(inW, line) }
	next := func() map[string]any {
		t.Helper()
		if !answers.Scan() {
			t.Fatalf("no answer: %v", answers.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(answers.Bytes(), &m); err != nil {
			t.Fatalf("answer %q: %v", answers.Text(), err)
		}
		return m
	}
	errCode := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	// Before initialize: tools/call is refused.
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"shell","arguments":{"command":"true"}}}`)
	if m := next(); m["error"] == nil {
		t.Errorf("a tool call before initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if m := next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`)
	if m := next(); errCode(m) != -32601 {
		t.Errorf("an unknown method: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"not an object"}`)
	if m := next(); m["error"] == nil {
		t.Errorf("params of the wrong type: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"shell","arguments":{"command":12}}}`)
	if m := next(); m["result"] == nil || m["result"].(map[string]any)["isError"] != true {
		t.Errorf("arguments of the wrong type: want a tool error, got %v", m)
	}
	send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`)
	if m := next(); m["error"] == nil && m["result"].(map[string]any)["isError"] != true {
		t.Errorf("an unknown tool: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file_read","arguments":{"path":"/etc/hostname","offset":-1}}}`)
	if m := next(); m["result"] == nil || m["result"].(map[string]any)["isError"] != true {
		t.Errorf("a negative offset: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	if m := next(); m["result"] == nil {
		t.Errorf("ping after the bad messages: %v", m)
	}
	// What the SDK's own stdio transport ended the session on: each is
	// answered with the JSON-RPC error for it (id null unless the
	// message had a valid one), then the session goes on.
	for _, c := range []struct {
		line string
		code float64
		id   any
		msg  string
	}{
		{`garbage`, -32700, nil, "Parse error"},
		// (The SDK's decoder took the next lines as the rest of this one.)
		{`{"jsonrpc":"2.0","id":9,"method":`, -32700, nil, "Parse error"},
		{`{"jsonrpc":"2.0","id":10,"method":"ping"} trailing`, -32700, nil, "Parse error"},
		{`{"jsonrpc":"2.0","id":1}{"jsonrpc":"2.0","id":2}`, -32700, nil, "Parse error"},
		{`"a string"`, -32600, nil, "Invalid Request"},
		{`42`, -32600, nil, "Invalid Request"},
		{`null`, -32600, nil, "Invalid Request"},
		{`{"jsonrpc":"1.0","id":11,"method":"ping"}`, -32600, float64(11), "Invalid Request"},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}`, -32600, nil, "Invalid Request"},
		{`{"jsonrpc":"2.0"}`, -32600, nil, "Invalid Request"},
		{`[]`, -32600, nil, "an empty batch"},
		{`[{"jsonrpc":"2.0","id":13,"method":"ping"},7]`, -32600, nil, "batch element 2"},
		{`[{"jsonrpc":"2.0","id":14,"method":"ping"},{"jsonrpc":"2.0","id":14,"method":"ping"}]`, -32600, nil, "reuses the id"},
		{`{"jsonrpc":"2.0","id":16,"method":"ping","params":"` + strings.Repeat("x", 5000) + `"}`, -32600, nil, "at most 4096 bytes"},
		{strings.Repeat("y", 3*4096+1), -32600, nil, "at most 4096 bytes"},
	} {
		send(c.line)
		m := next()
		e, _ := m["error"].(map[string]any)
		if id, ok := m["id"]; !ok || id != c.id || errCode(m) != c.code || !strings.Contains(fmt.Sprint(e["message"]), c.msg) {
			t.Errorf("%.60s: answered %v; want code %v with %q and id %v", c.line, m, c.code, c.msg, c.id)
		}
		send(``) // empty lines are skipped
		send(`{"jsonrpc":"2.0","id":100,"method":"ping"}`)
		if m := next(); m["result"] == nil || m["id"] != float64(100) {
			t.Fatalf("ping after %.60s: %v", c.line, m)
		}
	}
	// A valid batch is answered as one.
	send(`[{"jsonrpc":"2.0","id":15,"method":"ping"},{"jsonrpc":"2.0","id":16,"method":"ping"}]`)
	if !answers.Scan() || !strings.HasPrefix(answers.Text(), "[") || !strings.Contains(answers.Text(), `"id":16`) {
		t.Errorf("a batch: %q, %v", answers.Text(), answers.Err())
	}
	// The session ends when its input does, and the server's Run with it.
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end after its input closed")
	}
	if l, _ := local.List(context.Background()); len(l) != 0 {
		t.Errorf("malformed messages created sandboxes: %v", l)
	}
}

// TestTemplates: the model picks among the operator's templates, read
// from their directory, and cannot name a file outside it.
func TestTemplates(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "py.yaml"), []byte("hostname: py\nenv: {FROM_TEMPLATE: \"yes\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("bogus_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	local := sandboxtest.NewLocal(t, sandbox.LocalOptions{})
	srv, err := New(local, Options{Spec: sandbox.Spec{Identity: sandbox.Identity{Hostname: "dflt"}}, TemplatesDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, local: local, srv: srv}
	ct, st := sdk.NewInMemoryTransports()
	if _, err := srv.MCPServer().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	if e.cs, err = sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	var list listOut
	e.ok("sandbox_list", nil, &list)
	if strings.Join(list.Templates, ",") != "default,broken,py" {
		t.Errorf("templates: %v", list.Templates)
	}
	var v sandboxView
	e.ok("sandbox_create", map[string]any{"template": "py", "name": "p"}, &v)
	var r execResult
	e.ok("shell", map[string]any{"command": "echo $(hostname) $FROM_TEMPLATE", "sandbox": "p"}, &r)
	if r.Stdout != "py yes\n" || v.Template != "py" {
		t.Errorf("a sandbox of template py: %+v, %+v", r, v)
	}
	if r := e.shell("hostname"); r.Stdout != "dflt\n" {
		t.Errorf("the default sandbox: %+v", r)
	}
	e.fails("sandbox_create", map[string]any{"template": "broken"}, "broken (tell the operator)", "bogus_key")
	e.fails("sandbox_create", map[string]any{"template": "../py"}, "template name")
	e.fails("sandbox_create", map[string]any{"name": "p"}, "already named")
}
