package codeinterp

import (
	"strings"
	"testing"
)

// The TypeScript kernel (server/jskernel.py's TSKernel): the JavaScript
// kernel with each cell transpiled by the host's typescript module
// (Debian's node-typescript), as E2B's tests of "ts" expect it.

// tsContext skips the test without node and typescript, and returns a new
// TypeScript context of the package's server.
func tsContext(t *testing.T) (*server, string) {
	t.Helper()
	s := theServer(t)
	needHost(t, anyFile("/usr/bin/node", "/usr/local/bin/node"), "no node in /usr/bin or /usr/local/bin")
	needHost(t, anyFile("/usr/share/nodejs/typescript/package.json", "/usr/lib/node_modules/typescript/package.json",
		"/usr/local/lib/node_modules/typescript/package.json"), "no typescript module (node-typescript) on this host")
	info := s.newContext(t, map[string]any{"language": "ts"})
	if info["language"] != "typescript" || info["cwd"] != s.cwd {
		t.Fatalf("context %v, want language typescript in %s", info, s.cwd)
	}
	return s, info["id"].(string)
}

func TestTSTypesStateAndErrors(t *testing.T) {
	s, id := tsContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	lines := run(`const message: string = "Hello World!"; console.log(message)`)
	if lines[0]["execution_count"] != 1.0 || texts(lines, "stdout") != "Hello World!\n" || len(ofType(lines, "error")) != 0 {
		t.Errorf("typed const: %v", lines)
	}
	run("interface P { x: number }\nfunction add(p: P, n: number): number { return p.x + n }\nlet p: P = { x: 1 }")
	if got := mainResult(t, run("add(p, 2)")); got != "3" {
		t.Errorf("add(p, 2) = %q", got)
	}
	if got := mainResult(t, run("process.cwd()")); got != s.cwd {
		t.Errorf("cwd %q, want %q", got, s.cwd)
	}
	if got := mainResult(t, run("await Promise.resolve<string>('later')")); got != "later" {
		t.Errorf("await: %q", got)
	}
	if got := mainResult(t, run("import { readFileSync } from 'fs'\ntypeof readFileSync")); got != "function" {
		t.Errorf("import: %q", got)
	}
	if got := mainResult(t, run("{a: 1}")); got != "{ a: 1 }" {
		t.Errorf("object literal: %q", got)
	}
	// A syntax error is the transpiler's; a type error is not checked.
	e := ofType(run("let bad: = 1"), "error")
	if len(e) != 1 || e[0].str("name") != "SyntaxError" || !strings.HasPrefix(e[0].str("value"), "TS1110: Type expected.") {
		t.Errorf("syntax error: %v", e)
	}
	if got := mainResult(t, run("const n: number = 'not checked' as any; message.length")); got != "12" {
		t.Errorf("after the error: %q", got)
	}
}

func TestTSDefaultContextAndEnvVars(t *testing.T) {
	s, _ := tsContext(t)
	lines := s.run(t, map[string]any{"code": "const v: string | undefined = process.env.FOO; v", "language": "typescript", "env_vars": map[string]any{"FOO": "bar"}})
	if got := mainResult(t, lines); got != "bar" {
		t.Errorf("per execution: %q", got)
	}
	lines = s.run(t, map[string]any{"code": "process.env.FOO ?? 'default'", "language": "ts"})
	if got := mainResult(t, lines); got != "default" {
		t.Errorf("after: %q", got)
	}
}
