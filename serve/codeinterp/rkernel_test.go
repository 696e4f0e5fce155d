package codeinterp

import (
	"os"
	"strings"
	"testing"
)

// The R kernel (server/rkernel.py): IRkernel, Debian's r-cran-irkernel,
// driven as the Python kernel is, as E2B's tests of "r" expect it.

// needHost skips the test when ok is false (fails it with TENT_REQUIRE_SDK=1).
func needHost(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("TENT_REQUIRE_SDK") == "1" {
		t.Fatal(what + ", and TENT_REQUIRE_SDK=1 asks for these tests to run")
	}
	t.Skip(what)
}

// anyFile tells whether one of paths exists.
func anyFile(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// rContext skips the test without the host's IRkernel, and returns a new
// R context of the package's server.
func rContext(t *testing.T) (*server, string) {
	t.Helper()
	s := theServer(t)
	needHost(t, anyFile("/usr/share/jupyter/kernels/ir/kernel.json", "/usr/local/share/jupyter/kernels/ir/kernel.json") &&
		anyFile("/usr/bin/R", "/usr/local/bin/R"), "no IRkernel (r-cran-irkernel) on this host")
	info := s.newContext(t, map[string]any{"language": "R"})
	if info["language"] != "r" || info["cwd"] != s.cwd {
		t.Fatalf("context %v, want language r in %s", info, s.cwd)
	}
	return s, info["id"].(string)
}

// rResult is the text of the execution's one result (IRkernel's
// display_data: not a main result, as with E2B's server).
func rResult(t *testing.T, lines []line) string {
	t.Helper()
	res := ofType(lines, "result")
	if len(ofType(lines, "error")) != 0 || len(res) != 1 || res[0]["is_main_result"] != false {
		t.Fatalf("want one result, not a main one: %v", lines)
	}
	return res[0].str("text")
}

func TestRStateOutputAndCwd(t *testing.T) {
	s, id := rContext(t)
	run := func(code string) []line {
		t.Helper()
		return s.run(t, map[string]any{"code": code, "context_id": id})
	}
	lines := run(`print("Hello, World!"); message("oops")`)
	if lines[0]["execution_count"] != 1.0 || texts(lines, "stdout") != "[1] \"Hello, World!\"\n" || !strings.HasPrefix(texts(lines, "stderr"), "oops\n") {
		t.Errorf("print: %v", lines)
	}
	run("x <- 41")
	if got := rResult(t, run("x + 1")); got != "[1] 42" {
		t.Errorf("x + 1 = %q", got)
	}
	if got := rResult(t, run("getwd()")); got != `[1] "`+s.cwd+`"` {
		t.Errorf("getwd() = %q, want %q", got, s.cwd)
	}
	if lines := run("invisible(1)"); len(ofType(lines, "result")) != 0 || lines[0]["execution_count"] != 5.0 {
		t.Errorf("invisible: %v", lines)
	}
	// An error, and the context goes on.
	e := ofType(run(`f <- function() stop("in f"); f()`), "error")
	if len(e) != 1 || !strings.Contains(e[0].str("value"), "in f") || !strings.Contains(e[0].str("traceback"), `stop("in f")`) {
		t.Errorf("error: %v", e)
	}
	if got := rResult(t, run("x")); got != "[1] 41" {
		t.Errorf("after the error: %q", got)
	}
}

// TestRDefaultContextAndEnvVars: E2B's "env vars" tests of R, with values
// that need escaping in an R string.
func TestRDefaultContextAndEnvVars(t *testing.T) {
	s, _ := rContext(t)
	get := func(code string, env map[string]any) string {
		t.Helper()
		return rResult(t, s.run(t, map[string]any{"code": code, "language": "r", "env_vars": env}))
	}
	if got := get(`Sys.getenv("FOO")`, map[string]any{"FOO": "bar"}); got != `[1] "bar"` {
		t.Errorf("per execution: %q", got)
	}
	if got := get(`Sys.getenv("FOO", unset = "default")`, nil); got != `[1] "default"` {
		t.Errorf("after: %q", got)
	}
	if got := get(`Sys.getenv("TENT_TEST_SANDBOX_VAR")`, map[string]any{"TENT_TEST_SANDBOX_VAR": "overwrite"}); got != `[1] "overwrite"` {
		t.Errorf("overwrite: %q", got)
	}
	if got := get(`Sys.getenv("TENT_TEST_SANDBOX_VAR")`, nil); got != `[1] "supertest"` {
		t.Errorf("restored: %q", got)
	}
	odd := "it's \"q\" \\ é\t$x"
	lines := s.run(t, map[string]any{"code": `cat(Sys.getenv("ODD"))`, "language": "r", "env_vars": map[string]any{"ODD": odd}})
	if got := texts(lines, "stdout"); got != odd {
		t.Errorf("odd value: %q, want %q (%v)", got, odd, lines)
	}
}

// TestRInterruptWhenClientGoes: IRkernel is interrupted as the Python
// kernel is (Jupyter's interrupt) when the client goes, keeping the
// context's state.
func TestRInterruptWhenClientGoes(t *testing.T) {
	s, id := rContext(t)
	s.run(t, map[string]any{"code": "kept <- 41", "context_id": id})
	leave(t, s, id, "Sys.sleep(300)")
	// Without the interrupt, this waits behind the sleep until call's timeout.
	if got := rResult(t, s.run(t, map[string]any{"code": "kept + 1", "context_id": id})); got != "[1] 42" {
		t.Fatalf("next execution: %q", got)
	}
}
