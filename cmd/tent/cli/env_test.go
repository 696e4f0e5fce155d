package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// envInside runs /usr/bin/env in a sandbox and returns its variables.
func envInside(t *testing.T, inv invocation) map[string]string {
	t.Helper()
	inv.args = append(append([]string{"run"}, inv.args...), "--", "/usr/bin/env")
	r := inv.run(t)
	r.expect(t, 0)
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	return vars
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestDefaultEnvironmentIsClean(t *testing.T) {
	t.Parallel()
	vars := envInside(t, invocation{})
	if got, want := keys(vars), []string{"HOME", "LANG", "PATH", "TERM", "TZ", "USER"}; !slices.Equal(got, want) {
		t.Errorf("variables inside: %v, want exactly %v", got, want)
	}
	if vars["TERM"] != "xterm-test" || vars["LANG"] != "C.UTF-8" || vars["TZ"] != "UTC" {
		t.Errorf("TERM, LANG, TZ not passed through: %v", vars)
	}
	// Without TERM, LANG and TZ in tent's environment they are absent.
	vars = envInside(t, invocation{base: []string{"PATH=" + os.Getenv("PATH"), marker + "=leaked"}})
	if got, want := keys(vars), []string{"HOME", "PATH", "USER"}; !slices.Equal(got, want) {
		t.Errorf("variables inside: %v, want exactly %v", got, want)
	}
}

func TestEnvFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := writeFile(t, filepath.Join(dir, "first.env"), "# layer 1\nA=file1\nB=file1\nexport C=\"from file\"\n")
	second := writeFile(t, filepath.Join(dir, "second.env"), "B=file2\nD='x y'\n")

	vars := envInside(t, invocation{args: []string{"--env-pass", marker}})
	if vars[marker] != "leaked" {
		t.Errorf("--env-pass %s: got %q", marker, vars[marker])
	}

	vars = envInside(t, invocation{args: []string{"--env-inherit"}, env: []string{"OTHER=1"}})
	if vars[marker] != "leaked" || vars["OTHER"] != "1" {
		t.Errorf("--env-inherit did not pass the caller's environment: %v", vars)
	}

	vars = envInside(t, invocation{args: []string{
		"--env", "A=flag", "--env-file", first, "--env-file", second,
		"--env-pass", marker, "--env", marker + "=flag-wins", "--env", "E=a=b",
	}})
	want := map[string]string{"A": "flag", "B": "file2", "C": "from file", "D": "x y", "E": "a=b", marker: "flag-wins"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, vars[k], v, vars)
		}
	}

	// A relative --env-file is relative to tent's working directory.
	vars = envInside(t, invocation{args: []string{"--env-file", "second.env"}, dir: dir})
	if vars["B"] != "file2" {
		t.Errorf("relative --env-file: B = %q", vars["B"])
	}

	bad := writeFile(t, filepath.Join(dir, "bad.env"), "OK=1\n\n9LIVES=x\n")
	r := tent(t, "run", "--env-file", bad, "--", "true")
	r.expect(t, 125, "tent: --env-file: env file "+bad+": line 3: invalid variable name \"9LIVES\"")
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
