package codeinterp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The JavaScript kernel (server/jskernel.py, server/jsdriver.py): a node
// process per context, as E2B's tests of "js" and "javascript" expect it.

// jsContext skips the test without the host's node, and returns a new
// JavaScript context of the package's server.
func jsContext(t *testing.T) (*server, string) {
	t.Helper()
	s := theServer(t)
	found := false
	for _, p := range []string{"/usr/bin/node", "/usr/local/bin/node"} {
		if _, err := os.Stat(p); err == nil {
			found = true
		}
	}
	if !found {
		if os.Getenv("TENT_REQUIRE_SDK") == "1" {
			t.Fatal("no node in /usr/bin or /usr/local/bin, and TENT_REQUIRE_SDK=1 asks for these tests to run")
		}
		t.Skip("no node in /usr/bin or /usr/local/bin")
	}
	info := s.newContext(t, map[string]any{"language": "js"})
	if info["language"] != "javascript" || info["cwd"] != s.cwd {
		t.Fatalf("context %v, want language javascript in %s", info, s.cwd)
	}
	return s, info["id"].(string)
}

// texts joins the text of the lines of typ.
func texts(lines []line, typ string) string {
	var b strings.Builder
	for _, l := range ofType(lines, typ) {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

func TestJSStateOutputAndResults(t *testing.T) {
	s, id := jsContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	lines := run(`console.log("Hello World!"); console.error("oops")`)
	if lines[0]["execution_count"] != 1.0 || texts(lines, "stdout") != "Hello World!\n" || texts(lines, "stderr") != "oops\n" || len(ofType(lines, "result")) != 0 {
		t.Errorf("console.log: %v", lines)
	}
	// Top-level declarations persist, as in node's REPL.
	run("let x = 1; const o = {a: [1, 'b']}; function f() { return x + 1 }\nclass K {}")
	if got := mainResult(t, run("f()")); got != "2" {
		t.Errorf("f() = %q", got)
	}
	if got := mainResult(t, run("o")); got != "{ a: [ 1, 'b' ] }" {
		t.Errorf("o = %q", got)
	}
	// A cell that is an object literal is one, not a block (as in node's REPL).
	if got := mainResult(t, run("{a: 1, b: 'c'}")); got != "{ a: 1, b: 'c' }" {
		t.Errorf("object literal = %q", got)
	}
	// A string result is its text, unquoted.
	if got := mainResult(t, run("'it' + \"'s\"")); got != "it's" {
		t.Errorf("string result %q", got)
	}
	// Top-level await, its declarations kept.
	if got := mainResult(t, run("\n    await Promise.resolve('Hello World!')\n    ")); got != "Hello World!" {
		t.Errorf("await: %q", got)
	}
	run("const y = await Promise.resolve(20)")
	if got := mainResult(t, run("y + x")); got != "21" {
		t.Errorf("y + x = %q", got)
	}
	// Static ESM imports, default, named and namespace.
	lines = run("\n    import { readFileSync } from 'fs'\n    import path, { join as j } from 'node:path'\n    import * as os from 'os'\n    console.log(typeof readFileSync, typeof path.join, j('a', 'b'), typeof os.cpus)\n    ")
	if got := texts(lines, "stdout"); got != "function function a/b function\n" {
		t.Errorf("imports: %v", lines)
	}
	if got := mainResult(t, run("process.cwd()")); got != s.cwd {
		t.Errorf("cwd %q, want %q", got, s.cwd)
	}
	// Top-level declarations can be made again, as in Chrome's console and Deno.
	run("const o = 'again'; let x = 5; class K { k() { return 'k' } }")
	if got := mainResult(t, run("[o, x, new K().k()].join()")); got != "again,5,k" {
		t.Errorf("declared again: %q", got)
	}
	if lines := run("undefined"); len(ofType(lines, "result")) != 0 || lines[0]["execution_count"] != 14.0 {
		t.Errorf("undefined: %v", lines)
	}
}

func TestJSErrors(t *testing.T) {
	s, id := jsContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	lines := run("let kept = 3\nfunction g() { throw new TypeError('bad') }\ng()")
	e := ofType(lines, "error")
	if len(e) != 1 || e[0].str("name") != "TypeError" || e[0].str("value") != "bad" ||
		!strings.HasPrefix(e[0].str("traceback"), "TypeError: bad\n    at g (") || strings.Contains(e[0].str("traceback"), "jsdriver") {
		t.Errorf("thrown: %v", lines)
	}
	e = ofType(run("await Promise.reject(new RangeError('later'))"), "error")
	if len(e) != 1 || e[0].str("name") != "RangeError" || e[0].str("value") != "later" {
		t.Errorf("rejected: %v", e)
	}
	if e = ofType(run("foo("), "error"); len(e) != 1 || e[0].str("name") != "SyntaxError" {
		t.Errorf("syntax: %v", e)
	}
	if got := mainResult(t, run("kept")); got != "3" {
		t.Errorf("kept after the errors = %q", got)
	}
}

func TestJSDefaultContextAndEnvVars(t *testing.T) {
	s, _ := jsContext(t)
	get := func(code string, env map[string]any) string {
		t.Helper()
		return mainResult(t, s.run(t, map[string]any{"code": code, "language": "javascript", "env_vars": env}))
	}
	if got := get("process.env.FOO", map[string]any{"FOO": "bar"}); got != "bar" {
		t.Errorf("FOO = %q", got)
	}
	if got := get("process.env.FOO || 'default'", nil); got != "default" {
		t.Errorf("FOO after = %q", got)
	}
	if got := get("process.env.TENT_TEST_SANDBOX_VAR", map[string]any{"TENT_TEST_SANDBOX_VAR": "overwrite"}); got != "overwrite" {
		t.Errorf("override = %q", got)
	}
	if got := get("process.env.TENT_TEST_SANDBOX_VAR", nil); got != "supertest" {
		t.Errorf("after the override = %q", got)
	}
	if got := get("String(process.env.TENT_CI_PORT)", nil); got != "undefined" {
		t.Errorf("the server's TENT_CI_PORT reaches node: %q", got)
	}
	// Child processes see the execution's variables.
	if got := get("require('child_process').execSync('echo $FOO').toString().trim()", map[string]any{"FOO": "child"}); got != "child" {
		t.Errorf("child's FOO = %q", got)
	}
	if got := get("process.cwd()", nil); got != s.cwd {
		t.Errorf("the default context's cwd %q, want %q", got, s.cwd)
	}
}

// TestJSLargeOutput: output far past what the server holds for a client
// arrives whole and in order.
func TestJSLargeOutput(t *testing.T) {
	s, id := jsContext(t)
	lines := s.run(t, map[string]any{"context_id": id, "code": "for (let i = 0; i < 200000; i++) console.log(String(i).padStart(40, '.')); 'end'"})
	out := texts(lines, "stdout")
	var want strings.Builder
	for i := 0; i < 200000; i++ {
		fmt.Fprintf(&want, "%40s\n", strings.Repeat(".", 40-len(fmt.Sprint(i)))+fmt.Sprint(i))
	}
	if out != want.String() {
		t.Errorf("stdout: %d bytes, want %d", len(out), want.Len())
	}
	if got := mainResult(t, lines); got != "end" {
		t.Errorf("result %q", got)
	}
}

// leave starts code in the context and goes away once it has begun.
func leave(t *testing.T, s *server, id, code string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"code": code, "context_id": id})
	req, err := http.NewRequestWithContext(ctx, "POST", s.url+"/execute", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := resp.Body.Read(first); err != nil { // the execution has begun
		t.Fatal(err)
	}
}

// TestJSInterruptWhenClientGoes: a busy loop is interrupted when its client
// leaves. SIGINT stops one in the cell itself, and the context keeps its
// state; one that runs after an await is out of the signal's reach: node is
// killed, and the next execution gets a new one.
func TestJSInterruptWhenClientGoes(t *testing.T) {
	s, id := jsContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	run("let kept = 'yes'")
	leave(t, s, id, "console.log('looping'); while (true) {}")
	if got := mainResult(t, run("kept")); got != "yes" {
		t.Fatalf("after the interrupted loop: %q", got)
	}
	leave(t, s, id, "await null; console.log('looping'); while (true) {}")
	if got := mainResult(t, run("typeof kept")); got != "undefined" {
		t.Fatalf("after the killed loop: %q, want a new node", got)
	}
	// A pending await is interrupted too.
	run("let kept2 = 1")
	leave(t, s, id, "console.log('waiting'); await new Promise(() => {})")
	if got := mainResult(t, run("kept2")); got != "1" {
		t.Fatalf("after the interrupted await: %q", got)
	}
}

func TestJSKernelDeathThenNewNode(t *testing.T) {
	s, id := jsContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	e := ofType(run("var z = 1; process.exit(3)"), "error")
	if len(e) != 1 || e[0].str("name") != "KernelDied" {
		t.Fatalf("errors %v, want KernelDied", e)
	}
	// A new node: the variables gone, the count from 1.
	if lines := run("typeof z"); mainResult(t, lines) != "undefined" || lines[0]["execution_count"] != 1.0 {
		t.Errorf("after the death: %v", lines)
	}
	// A restart empties the context.
	run("var w = 2")
	if status, body := s.call(t, "POST", "/contexts/"+id+"/restart", nil); status != http.StatusOK {
		t.Fatalf("restart: %d %s", status, body)
	}
	if got := mainResult(t, run("typeof w")); got != "undefined" {
		t.Errorf("after the restart: %q", got)
	}
}

// TestSlowClientStopsTheKernel: a client that reads nothing stops the
// kernel's process in a write (the server holds a bounded queue, not all
// the output), in both kernels of tent's own; once it goes, the
// context's next execution runs.
func TestSlowClientStopsTheKernel(t *testing.T) {
	for _, c := range []struct {
		kernel  string
		context func(*testing.T) (*server, string)
		code    string
	}{
		{"node", jsContext, "const fs = require('fs'); fs.writeFileSync(%q, String(process.pid)); const b = 'x'.repeat(1 << 20);\n" +
			"for (let i = 1; i <= 256; i++) { process.stdout.write(b); fs.writeFileSync(%q, String(i)) }"},
		{"bash", func(t *testing.T) (*server, string) {
			s := theServer(t)
			return s, s.newContext(t, map[string]any{"language": "bash"})["id"].(string)
		}, "echo -n $$ > %q; b=$(head -c 1048576 /dev/zero | tr '\\0' x)\n" +
			"for i in $(seq 256); do printf %%s \"$b\"; echo -n $i > %q; done"},
	} {
		t.Run(c.kernel, func(t *testing.T) {
			s, id := c.context(t)
			slowClient(t, s, id, c.kernel, c.code)
		})
	}
}

// slowClient runs code (a format of the paths of a pid file and a
// progress file) for a client that reads nothing: the kernel's process
// must block writing, well before its 256 MiB are out.
func slowClient(t *testing.T, s *server, id, kernel, code string) {
	dir := t.TempDir()
	pidFile, progress := filepath.Join(dir, "pid"), filepath.Join(dir, "progress")
	code = fmt.Sprintf(code, pidFile, progress)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"code": code, "context_id": id})
	req, err := http.NewRequestWithContext(ctx, "POST", s.url+"/execute", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req) // the body is never read
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	shown := false // whether /proc/PID/wchan names a wait here (a running process's is 0)
	// The kernel waits for the server to read: blocked in a write, and
	// still there a second later with no more written (a server that
	// reads it all only makes it wait a moment now and then).
	var blocked string // the progress when it was first seen blocked
	var since time.Time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", s.cmd.Process.Pid)); err == nil && string(w) != "0" {
			shown = true
		}
		pid, _ := os.ReadFile(pidFile)
		wchan, _ := os.ReadFile("/proc/" + string(pid) + "/wchan")
		done, _ := os.ReadFile(progress)
		switch {
		case len(pid) == 0 || !strings.Contains(string(wchan), "pipe_write"):
			blocked = ""
		case blocked == "" || blocked != string(done):
			blocked, since = string(done), time.Now()
		}
		if blocked != "" && time.Since(since) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			if !shown {
				t.Skip("/proc/PID/wchan is hidden here")
			}
			done, _ := os.ReadFile(progress)
			t.Fatalf("%s never blocked in a write: it wrote %s MiB of 256", kernel, done)
		}
	}
	done, _ := os.ReadFile(progress)
	if n, err := strconv.Atoi(string(done)); err == nil && n > 64 {
		t.Errorf("%s wrote %d MiB for a client that reads nothing", kernel, n)
	}
	// The client goes; once the context's next execution runs, the
	// kernel has stopped writing in dir (which t.TempDir's cleanup then
	// removes).
	cancel()
	resp.Body.Close()
	next := map[string]string{"node": "console.log('next')", "bash": "echo next"}[kernel]
	if got := texts(s.run(t, map[string]any{"code": next, "context_id": id}), "stdout"); got != "next\n" {
		t.Errorf("the next execution: %q", got)
	}
}

// TestJSImportsFromCwd: imports and require resolve from the context's
// working directory: its files and its node_modules.
func TestJSImportsFromCwd(t *testing.T) {
	s, _ := jsContext(t)
	dir := t.TempDir()
	for name, text := range map[string]string{
		"local.mjs":                         "export const m = 'local'",
		"node_modules/tentpkg/index.js":     "module.exports = { v: 'pkg' }",
		"node_modules/tentpkg/package.json": `{"name": "tentpkg", "main": "index.js"}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id := s.newContext(t, map[string]any{"language": "javascript", "cwd": dir})["id"]
	run := func(code string) string {
		t.Helper()
		lines := s.run(t, map[string]any{"code": code, "context_id": id})
		if e := texts(lines, "stderr"); e != "" { // node's ExperimentalWarning, say
			t.Errorf("%s: stderr %q", code, e)
		}
		return mainResult(t, lines)
	}
	if got := run("import { m } from './local.mjs'\nimport p from 'tentpkg'\n[m, p.v, require('tentpkg').v].join(' ')"); got != "local pkg pkg" {
		t.Errorf("static imports and require: %q", got)
	}
	if got := run("(await import('./local.mjs')).m"); got != "local" {
		t.Errorf("dynamic import: %q", got)
	}
	// A cell runs again: the imports' bindings are vars.
	if got := run("import { m } from './local.mjs'\nm"); got != "local" {
		t.Errorf("imports again: %q", got)
	}
}

// A fresh server lists a JavaScript context beside the Python one before
// any request made one, as E2B's server (its "list contexts" tests).
func TestJSDefaultContextAtStart(t *testing.T) {
	jsContext(t) // skips without node
	s := startServer()
	defer func() {
		if err := s.stop(); err != nil {
			t.Error(err)
		}
	}()
	if s.startEr != nil {
		t.Fatalf("server did not start: %v\n%s", s.startEr, s.stderr.String())
	}
	_, body := s.call(t, "GET", "/contexts", nil)
	var got []map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	langs := map[string]int{}
	for _, c := range got {
		langs[c["language"].(string)]++
	}
	if len(got) != 2 || langs["python"] != 1 || langs["javascript"] != 1 {
		t.Errorf("contexts at start: %s, want one python and one javascript", body)
	}
}
