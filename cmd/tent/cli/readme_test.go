package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// readmeBlock is one fenced block of README.md.
type readmeBlock struct {
	line   int    // of the opening fence
	lang   string // the fence's info string
	marker string // the <!-- readme: ... --> comment just above, if any
	text   string
}

// readmeBlocks parses README.md's fenced blocks.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	prev := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{line: n, lang: strings.TrimPrefix(line, "```")}
			if m, ok := strings.CutPrefix(prev, "<!-- readme: "); ok {
				cur.marker = strings.TrimSuffix(m, " -->")
			}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
		prev = line
	}
	if cur != nil {
		t.Fatalf("README.md:%d: the block never ends", cur.line)
	}
	return blocks
}

// repoRoot is the module's root directory: the nearest directory above
// this source file that holds go.mod (the package's own directory when
// none does, as where the test binary runs without the checkout).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return filepath.Dir(file)
		}
	}
}

// Every code and command example of README.md runs, so that a wrong one
// fails the suite (the policy example once failed as written, and the
// Provision example deferred Terminate before checking the error):
//
//   - ```go blocks are whole programs: built against this checkout and
//     run; their stdout must be what their "// Output:" comment says;
//   - ```sh blocks run in order with sh -e, in one scratch directory,
//     with this build of tent first on PATH and a private state
//     directory (as root: they set limits and suspend);
//   - ```yaml blocks are parsed; one marked "file NAME" is written there
//     first (the policy example, which a later block runs);
//   - "mcp-client: ..." runs a ```sh block of `CLIENT mcp add NAME --
//     CMD...` lines: each CMD is started, with this build of tent, as
//     the client would start it and driven by the Go SDK's client;
//     "mcp-config: ..." does the same for each server of a ```json
//     mcpServers block (see mcp_test.go);
//   - "tent-binary: ..." runs the block's ./bin/tent command with this
//     build; "e2b: ..." runs a ```js block with node and the official
//     E2B SDK against a `tent serve` of this build (see runReadmeSDK),
//     "e2b-py: ..." a ```python block with the Python SDK likewise;
//     "skip: REASON" is not run, and must say why.
func TestReadmeExamples(t *testing.T) {
	readme := filepath.Join(repoRoot(), "README.md")
	if _, err := os.Stat(readme); err != nil && os.Getenv("TENT_TESTDATA") != "" {
		t.Skipf("no README.md beside the test binary (VM run): %v", err)
	}
	blocks := readmeBlocks(t, readme)
	work := sandboxDir(t) // a root caller's rw/cow sources need a non-root owner
	state := t.TempDir()
	env := append(baseEnv(), "TENT_STATE_DIR="+state, "PATH="+filepath.Dir(tentBin)+":"+os.Getenv("PATH"))
	t.Cleanup(func() { tent(t, "--state-dir", state, "rm", "--all") })
	counts := map[string]int{}
	for _, b := range blocks {
		where := "README.md:" + strconv.Itoa(b.line)
		kind, arg, _ := strings.Cut(b.marker, " ")
		switch {
		case kind == "skip:":
			if strings.TrimSpace(arg) == "" {
				t.Errorf("%s: a skipped block must say why", where)
			}
			counts["skipped"]++
		case kind == "file":
			if err := os.WriteFile(filepath.Join(work, arg), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			var v any
			if err := yaml.Unmarshal([]byte(b.text), &v); err != nil {
				t.Errorf("%s: %v", where, err)
			}
			counts["file"]++
		case kind == "e2b:":
			runReadmeSDK(t, where, state, b.text, false)
			counts["js"]++
		case kind == "e2b-py:":
			runReadmeSDK(t, where, state, b.text, true)
			counts["py"]++
		case kind == "mcp-client:":
			runReadmeMCPClients(t, where, work, env, b.text)
			counts["mcp"]++
		case kind == "mcp-config:":
			runReadmeMCPConfig(t, where, work, env, b.text)
			counts["mcp"]++
		case kind == "tent-binary:":
			_, cmd, ok := strings.Cut(b.text, "./bin/tent ")
			if !ok {
				t.Fatalf("%s: no ./bin/tent command", where)
			}
			runReadmeShell(t, where, work, env, "tent "+cmd)
			counts["sh"]++
		case b.lang == "yaml":
			var v map[string]any
			if err := yaml.Unmarshal([]byte(b.text), &v); err != nil || len(v) == 0 {
				t.Errorf("%s: YAML %v: %v", where, v, err)
			}
			counts["yaml"]++
		case b.lang == "go":
			runReadmeProgram(t, where, b.text)
			counts["go"]++
		case b.lang == "sh":
			runReadmeShell(t, where, work, env, b.text)
			counts["sh"]++
		default:
			t.Errorf("%s: a ```%s block that the test does not know how to run (marker %q)", where, b.lang, b.marker)
		}
	}
	// The README's examples, by kind: a parse that misses blocks fails.
	if counts["go"] != 2 || counts["sh"] != 5 || counts["file"] != 1 || counts["yaml"] != 2 || counts["skipped"] != 4 || counts["js"] != 2 || counts["py"] != 1 || counts["mcp"] != 2 {
		t.Errorf("README blocks run: %v", counts)
	}
}

// runReadmeShell runs a README shell block (as root: its commands set
// limits, suspend and read cgroups).
func runReadmeShell(t *testing.T, where, dir string, env []string, script string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("%s: not run: the README's commands set limits, which need root or a delegated cgroup", where)
		return
	}
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		var logs []byte
		for _, kv := range env {
			if d, ok := strings.CutPrefix(kv, "TENT_STATE_DIR="); ok {
				paths, _ := filepath.Glob(filepath.Join(d, "*.log"))
				for _, p := range paths {
					b, _ := os.ReadFile(p)
					logs = append(logs, p+":\n"+string(b)...)
				}
			}
		}
		t.Errorf("%s: %v\n%s\noutput:\n%s\nsupervisor logs:\n%s", where, err, script, out, logs)
	}
}

// runReadmeProgram builds a README Go program against this checkout
// (offline: GOPROXY=off) and checks its output. It needs the go command
// and the module cache: the root run of make test has both; the
// unprivileged and VM runs, which run prebuilt test binaries, do not.
func runReadmeProgram(t *testing.T, where, src string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil || os.Getenv("TENT_BINARY") != "" {
		t.Logf("%s: not built: no go command here, or a prebuilt run (TENT_BINARY)", where)
		return
	}
	_, want, ok := strings.Cut(src, "\t// Output:\n")
	if !ok {
		t.Fatalf("%s: a Go example needs an // Output: comment", where)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(strings.Split(want, "\n}")[0]), "\n") {
		lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(l), "//"), " "))
	}
	want = strings.Join(lines, "\n") + "\n"
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(repoRoot(), "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := "module readmeexample\n\ngo 1.26\n\nrequire github.com/tent-sandbox/tent v0.0.0\n\nreplace github.com/tent-sandbox/tent => " + repoRoot() + "\n"
	for name, data := range map[string]string{"go.mod": mod, "go.sum": string(sum), "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "example")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: building the example: %v\n%s", where, err, out)
	}
	run := exec.Command(bin)
	run.Dir = dir
	out, err := run.Output()
	if err != nil {
		t.Errorf("%s: running the example: %v", where, err)
	}
	if string(out) != want {
		t.Errorf("%s: the example printed %q, want %q", where, out, want)
	}
}
