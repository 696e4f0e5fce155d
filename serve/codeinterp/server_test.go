package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestHealth(t *testing.T) {
	s := theServer(t)
	status, body := s.call(t, "GET", "/health", nil)
	if status != http.StatusOK || body != `"OK"` {
		t.Fatalf("GET /health: %d %q, want 200 \"OK\" as E2B's server", status, body)
	}
}

func TestExecuteStreamsLinesInOrder(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, nil)["id"]
	lines := s.run(t, map[string]any{"code": "x = 1\nprint('hi')\nimport sys; print('oops', file=sys.stderr)\nx", "context_id": id})
	var types []string
	for _, l := range lines {
		types = append(types, l.str("type"))
	}
	if want := []string{"number_of_executions", "stdout", "stderr", "result"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("types %v, want %v: %v", types, want, lines)
	}
	if lines[0]["execution_count"] != 1.0 {
		t.Errorf("execution_count %v, want 1 (start-up code is silent)", lines[0]["execution_count"])
	}
	if lines[1].str("text") != "hi\n" || lines[1].str("timestamp") == "" {
		t.Errorf("stdout line %v", lines[1])
	}
	if lines[2].str("text") != "oops\n" {
		t.Errorf("stderr line %v", lines[2])
	}
	want := line{"type": "result", "text": "1", "extra": map[string]any{}, "is_main_result": true}
	if !reflect.DeepEqual(lines[3], want) {
		t.Errorf("result %v, want %v", lines[3], want)
	}
	// A string result comes without its repr quotes, as E2B's server gives it.
	if got := mainResult(t, s.run(t, map[string]any{"code": "'abc'", "context_id": id})); got != "abc" {
		t.Errorf("text of 'abc': %q", got)
	}
	// The error, then at once another execution: it runs (not aborted).
	errLines := ofType(s.run(t, map[string]any{"code": "xyz", "context_id": id}), "error")
	if len(errLines) != 1 || errLines[0].str("name") != "NameError" || errLines[0].str("value") != "name 'xyz' is not defined" ||
		!strings.Contains(errLines[0].str("traceback"), "----> 1 xyz") {
		t.Errorf("error lines %v", errLines)
	}
	lines = s.run(t, map[string]any{"code": "x + 1", "context_id": id})
	if lines[0]["execution_count"] != 4.0 || mainResult(t, lines) != "2" {
		t.Errorf("after the error: %v", lines)
	}
}

func TestStatusCodesAsE2B(t *testing.T) {
	s := theServer(t)
	for _, c := range []struct {
		method, path string
		body         any
		status       int
		prefix       string
	}{
		{"POST", "/execute", map[string]any{"code": "1", "language": "python", "context_id": "x"}, 400, "Only one of context_id or language can be provided"},
		{"POST", "/execute", map[string]any{"code": "1", "context_id": "nope"}, 404, "Context nope not found"},
		{"POST", "/execute", map[string]any{"cod": "1"}, 422, `{"detail": [{"loc": ["body", "code"]`},
		{"POST", "/execute", map[string]any{"code": "1", "env_vars": map[string]any{"A": 1}}, 422, `{"detail": [{"loc": ["body", "env_vars"]`},
		{"POST", "/execute", map[string]any{"code": "1", "language": "cobol"}, 500, "Failed to create context: no 'cobol' kernel on this host"},
		{"POST", "/contexts", map[string]any{"language": "cobol"}, 500, "Failed to create context: no 'cobol' kernel"},
		{"DELETE", "/contexts/nope", nil, 404, "Context nope not found"},
		{"POST", "/contexts/nope/restart", nil, 404, "Context nope not found"},
	} {
		status, body := s.call(t, c.method, c.path, c.body)
		if status != c.status || !strings.HasPrefix(body, c.prefix) {
			t.Errorf("%s %s %v: %d %q, want %d %q...", c.method, c.path, c.body, status, body, c.status, c.prefix)
		}
	}
}

func TestContextsCreateListRestartDelete(t *testing.T) {
	s := theServer(t)
	dir := t.TempDir()
	info := s.newContext(t, map[string]any{"language": "python", "cwd": dir})
	id, _ := info["id"].(string)
	if id == "" || info["language"] != "python" || info["cwd"] != dir {
		t.Fatalf("created %v", info)
	}
	_, body := s.call(t, "GET", "/contexts", nil)
	var list []map[string]any
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 || !reflect.DeepEqual(list[len(list)-1], info) {
		t.Fatalf("list %v: the new context is not last", list)
	}
	if got := mainResult(t, s.run(t, map[string]any{"code": "import os; v = 7; os.getcwd()", "context_id": id})); got != dir {
		t.Errorf("cwd %q, want %q", got, dir)
	}
	// Another context does not see v; this one does.
	other := s.newContext(t, nil)["id"]
	if e := ofType(s.run(t, map[string]any{"code": "v", "context_id": other}), "error"); len(e) != 1 || e[0].str("value") != "name 'v' is not defined" {
		t.Errorf("v in another context: %v", e)
	}
	if got := mainResult(t, s.run(t, map[string]any{"code": "v", "context_id": id})); got != "7" {
		t.Errorf("v = %q", got)
	}
	if status, body := s.call(t, "POST", "/contexts/"+id+"/restart", nil); status != 200 || body != "null" {
		t.Fatalf("restart: %d %q", status, body)
	}
	e := ofType(s.run(t, map[string]any{"code": "v", "context_id": id}), "error")
	if len(e) != 1 || e[0].str("name") != "NameError" || e[0].str("value") != "name 'v' is not defined" {
		t.Errorf("after restart: %v", e)
	}
	if status, body := s.call(t, "DELETE", "/contexts/"+id, nil); status != 200 || body != "null" {
		t.Fatalf("delete: %d %q", status, body)
	}
	_, body = s.call(t, "GET", "/contexts", nil)
	if strings.Contains(body, id) {
		t.Errorf("deleted context still listed: %s", body)
	}
	if status, _ := s.call(t, "POST", "/execute", map[string]any{"code": "1", "context_id": id}); status != 404 {
		t.Errorf("execute in a deleted context: %d, want 404", status)
	}
}

func TestDefaultContextAndCwd(t *testing.T) {
	s := theServer(t)
	for _, req := range []map[string]any{{"code": "import os; os.getcwd()"}, {"code": "import os; os.getcwd()", "language": "Python"}} {
		if got := mainResult(t, s.run(t, req)); got != s.cwd {
			t.Errorf("%v: cwd %q, want %q", req, got, s.cwd)
		}
	}
	if got := s.newContext(t, map[string]any{"cwd": "/nonexistent-dir"})["cwd"]; got != s.cwd {
		t.Errorf("a context asked for a missing cwd says %v, want the default %q it runs in", got, s.cwd)
	}
}

func TestEnvVarsPerExecutionRestored(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, nil)["id"]
	get := func(name string, env map[string]any) string {
		t.Helper()
		lines := s.run(t, map[string]any{"code": "import os; print(os.getenv('" + name + "', 'default'))", "context_id": id, "env_vars": env})
		if out := ofType(lines, "stdout"); len(out) == 1 {
			return strings.TrimSuffix(out[0].str("text"), "\n")
		}
		t.Fatalf("lines %v", lines)
		return ""
	}
	if got := get("FOO", map[string]any{"FOO": `it's "bar"`}); got != `it's "bar"` {
		t.Errorf("FOO = %q", got)
	}
	if got := get("FOO", nil); got != "default" {
		t.Errorf("FOO after = %q, want default", got)
	}
	// The sandbox's environment reaches the kernel; an override is undone.
	if got := get("TENT_TEST_SANDBOX_VAR", map[string]any{"TENT_TEST_SANDBOX_VAR": "overwrite"}); got != "overwrite" {
		t.Errorf("override = %q", got)
	}
	if got := get("TENT_TEST_SANDBOX_VAR", nil); got != "supertest" {
		t.Errorf("after the override = %q, want supertest", got)
	}
	if got := get("TENT_CI_PORT", nil); got != "default" {
		t.Errorf("the server's own TENT_CI_ variables reach the kernel: %q", got)
	}
}

// TestInterruptWhenClientGoes: a client that leaves mid-execution gets the
// kernel interrupted, so that the next execution runs (else it would wait
// for the 300 s sleep, past the test's timeout).
func TestInterruptWhenClientGoes(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, nil)["id"].(string)
	leave(t, s, id, "import time; time.sleep(300)")
	// Without the interrupt, this waits behind the sleep until call's timeout.
	if got := mainResult(t, s.run(t, map[string]any{"code": "1 + 1", "context_id": id})); got != "2" {
		t.Fatalf("next execution: %q", got)
	}
}

func TestKernelDeathThenNewKernel(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, nil)["id"]
	e := ofType(s.run(t, map[string]any{"code": "y = 1\nimport os; os._exit(3)", "context_id": id}), "error")
	if len(e) != 1 || e[0].str("name") != "KernelDied" {
		t.Fatalf("errors %v, want KernelDied", e)
	}
	lines := s.run(t, map[string]any{"code": "y", "context_id": id})
	if e := ofType(lines, "error"); len(e) != 1 || e[0].str("value") != "name 'y' is not defined" || lines[0]["execution_count"] != 1.0 {
		t.Errorf("after the death: %v", lines)
	}
}

func TestResultForms(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, nil)["id"]
	lines := s.run(t, map[string]any{"context_id": id, "code": "from IPython.display import display\n" +
		"display({'text/latex': r'\\text{X}', 'application/x-custom': 'c'}, raw=True)\n{'a': [1, 2.5, None]}"})
	r := ofType(lines, "result")
	want := []line{
		{"type": "result", "latex": `\text{X}`, "extra": map[string]any{"application/x-custom": "c"}, "is_main_result": false},
		{"type": "result", "text": "{'a': [1, 2.5, None]}", "json": map[string]any{"a": []any{1.0, 2.5, nil}}, "extra": map[string]any{}, "is_main_result": true},
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("results %v\nwant %v", r, want)
	}
}

func TestBashContext(t *testing.T) {
	s := theServer(t)
	stdout := func(lines []line) string {
		var b strings.Builder
		for _, l := range ofType(lines, "stdout") {
			b.WriteString(l.str("text"))
		}
		return b.String()
	}
	if got := stdout(s.run(t, map[string]any{"code": "echo $FOO", "language": "bash", "env_vars": map[string]any{"FOO": "it's"}})); got != "it's\n" {
		t.Errorf("echo $FOO: %q", got)
	}
	if got := stdout(s.run(t, map[string]any{"code": "echo ${FOO:-default}; pwd", "language": "bash"})); got != "default\n"+s.cwd+"\n" {
		t.Errorf("after: %q", got)
	}
	id := s.newContext(t, map[string]any{"language": "bash"})["id"]
	lines := s.run(t, map[string]any{"code": "v=5; cd /; printf 'no newline'", "context_id": id})
	if lines[0]["execution_count"] != 1.0 || stdout(lines) != "no newline" {
		t.Errorf("lines %v", lines)
	}
	lines = s.run(t, map[string]any{"code": "echo $v $PWD; echo e >&2; false", "context_id": id})
	if stdout(lines) != "5 /\n" || len(ofType(lines, "stderr")) != 1 {
		t.Errorf("state kept: %v", lines)
	}
	if e := ofType(lines, "error"); len(e) != 1 || e[0].str("value") != "1" {
		t.Errorf("error of false: %v", e)
	}
}

// TestOneExecutionAtATime: a second execution in a context waits for the
// first (a bash context has one bash: without the wait, the second would
// fail at once).
func TestOneExecutionAtATime(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, map[string]any{"language": "bash"})["id"].(string)
	flag := filepath.Join(t.TempDir(), "flag")
	post := func(code string) (*http.Response, error) {
		b, _ := json.Marshal(map[string]any{"code": code, "context_id": id})
		return http.Post(s.url+"/execute", "application/json", bytes.NewReader(b))
	}
	first, err := post("while [ ! -e " + flag + " ]; do sleep 0.05; done; echo first")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	rd := bufio.NewReader(first.Body)
	head, err := rd.ReadString('\n') // the first execution has begun
	if err != nil || !strings.Contains(head, "number_of_executions") {
		t.Fatalf("first line %q: %v", head, err)
	}
	type answer struct {
		lines []line
		err   error
	}
	second := make(chan answer, 1)
	go func() {
		resp, err := post("echo second")
		if err != nil {
			second <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			var a answer
			a.lines, a.err = parseLines(string(b))
			second <- a
			return
		}
		second <- answer{err: err}
	}()
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := parseLines(head + string(rest))
	if err != nil || len(ofType(lines, "stdout")) != 1 || ofType(lines, "stdout")[0].str("text") != "first\n" {
		t.Fatalf("first execution: %v %v", lines, err)
	}
	a := <-second
	if a.err != nil {
		t.Fatal(a.err)
	}
	if out := ofType(a.lines, "stdout"); len(out) != 1 || out[0].str("text") != "second\n" || a.lines[0]["execution_count"] != 2.0 {
		t.Fatalf("second execution: %v", a.lines)
	}
}

// TestClientGoneBeforeItsTurn: an execution whose client leaves while it
// waits for the context does not run.
func TestClientGoneBeforeItsTurn(t *testing.T) {
	s := theServer(t)
	id := s.newContext(t, map[string]any{"language": "bash"})["id"].(string)
	dir := t.TempDir()
	flag, marker := filepath.Join(dir, "flag"), filepath.Join(dir, "marker")
	post := func(ctx context.Context, code string) (*http.Response, error) {
		b, _ := json.Marshal(map[string]any{"code": code, "context_id": id})
		req, err := http.NewRequestWithContext(ctx, "POST", s.url+"/execute", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	}
	first, err := post(context.Background(), "while [ ! -e "+flag+" ]; do sleep 0.05; done")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	if _, err := bufio.NewReader(first.Body).ReadString('\n'); err != nil { // it has begun
		t.Fatal(err)
	}
	// The second waits for the first; its headers come at once (as from
	// E2B's server), then its client gives up.
	ctx, cancel := context.WithCancel(context.Background())
	second, err := post(ctx, "touch "+marker)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	second.Body.Close()
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(first.Body); err != nil {
		t.Fatal(err)
	}
	// The next execution is the context's second, and nothing was touched.
	if lines := s.run(t, map[string]any{"code": "true", "context_id": id}); lines[0]["execution_count"] != 2.0 {
		t.Errorf("the next execution is number %v, want 2: the abandoned one ran", lines[0]["execution_count"])
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the abandoned execution ran")
	}
}
