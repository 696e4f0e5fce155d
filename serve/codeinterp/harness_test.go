package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests (server_test.go, charts_test.go) start server/main.py on the host (no sandbox) with
// /usr/bin/python3 on a free loopback port, once for the package, and talk
// to it over HTTP. Each test makes its own context, so that execution counts
// and variables are its own.

const python = "/usr/bin/python3"

// serverModules are what the server itself imports.
var serverModules = []string{"tornado", "zmq", "jupyter_client", "ipykernel"}

type server struct {
	url     string
	cwd     string // the default contexts' working directory
	tmp     string // the server's $TMPDIR: its kernels' files are there
	cmd     *exec.Cmd
	exited  chan struct{}
	stderr  *lockedBuffer
	startEr error
}

var (
	shared     *server
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil && shared.cmd != nil {
		if err := shared.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "codeinterp:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needModules skips the test (fails it with TENT_REQUIRE_SDK=1) when
// /usr/bin/python3 cannot import one of mods.
func needModules(t *testing.T, mods ...string) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(python); err != nil {
		missing = append(missing, python)
		mods = nil
	}
	for _, m := range mods {
		if exec.Command(python, "-c", "import "+m).Run() != nil {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s cannot import: %s", python, strings.Join(missing, ", "))
	if os.Getenv("TENT_REQUIRE_SDK") == "1" {
		t.Fatal(msg + ", and TENT_REQUIRE_SDK=1 asks for these tests to run")
	}
	t.Skip(msg)
}

// theServer starts the package's server on first use.
func theServer(t *testing.T) *server {
	t.Helper()
	needModules(t, serverModules...)
	sharedOnce.Do(func() { shared = startServer() })
	if shared.startEr != nil {
		t.Fatalf("server did not start: %v\n%s", shared.startEr, shared.stderr.String())
	}
	return shared
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startServer() *server {
	s := &server{stderr: &lockedBuffer{}}
	s.startEr = s.start()
	return s
}

func (s *server) start() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	if s.tmp, err = os.MkdirTemp("", "tent-ci-test-"); err != nil {
		return err
	}
	s.cwd = filepath.Join(s.tmp, "home")
	if err := os.Mkdir(s.cwd, 0o700); err != nil {
		return err
	}
	s.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd := exec.Command(python, "server/main.py")
	cmd.Env = append(os.Environ(),
		fmt.Sprintf("TENT_CI_PORT=%d", port),
		"TENT_CI_CWD="+s.cwd,
		"TMPDIR="+s.tmp,
		"TENT_TEST_SANDBOX_VAR=supertest",
	)
	cmd.Stderr = s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.exited) }()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited")
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(s.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("no answer on %s/health", s.url)
}

// stop ends the server (SIGTERM, then SIGKILL to its process group) and
// checks that none of its kernels is left and its private directory is gone.
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	defer os.RemoveAll(s.tmp)
	var left []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		if left = processesMentioning(s.tmp); len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		return fmt.Errorf("processes left after the server: %v", left)
	}
	entries, _ := filepath.Glob(filepath.Join(s.tmp, "tent-ci-*"))
	if len(entries) > 0 {
		return fmt.Errorf("the server left %v", entries)
	}
	return nil
}

// processesMentioning lists the processes whose command line has dir in it.
func processesMentioning(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // bounded: keep the start
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// line is one line of /execute's stream.
type line map[string]any

func (l line) str(k string) string { s, _ := l[k].(string); return s }

// call sends a request; it returns the status and the body.
func (s *server) call(t *testing.T, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nserver log:\n%s", method, path, err, s.stderr.String())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// run executes code; keepalive lines are dropped, end_of_execution must end it.
func (s *server) run(t *testing.T, req map[string]any) []line {
	t.Helper()
	status, body := s.call(t, "POST", "/execute", req)
	if status != http.StatusOK {
		t.Fatalf("execute %v: %d %s", req, status, body)
	}
	out, err := parseLines(body)
	if err != nil {
		t.Fatalf("execute %v: %v", req, err)
	}
	return out
}

// parseLines splits an /execute body into its lines, without the keepalive
// ones and the end_of_execution that must end it.
func parseLines(body string) ([]line, error) {
	var out []line
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %q: %v", sc.Text(), err)
		}
		if l["type"] != "keepalive" {
			out = append(out, l)
		}
	}
	if len(out) == 0 || out[len(out)-1]["type"] != "end_of_execution" {
		return nil, fmt.Errorf("no end_of_execution at the end of %q", body)
	}
	return out[:len(out)-1], nil
}

// newContext creates a context and returns its id.
func (s *server) newContext(t *testing.T, req map[string]any) map[string]any {
	t.Helper()
	if req == nil {
		req = map[string]any{} // what the SDKs send without options
	}
	status, body := s.call(t, "POST", "/contexts", req)
	if status != http.StatusOK {
		t.Fatalf("create context %v: %d %s", req, status, body)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// mainResult returns the text of the execution's main result.
func mainResult(t *testing.T, lines []line) string {
	t.Helper()
	for _, l := range lines {
		if l["type"] == "error" {
			t.Fatalf("error: %v", l)
		}
		if l["type"] == "result" && l["is_main_result"] == true {
			return l.str("text")
		}
	}
	t.Fatalf("no main result in %v", lines)
	return ""
}

func ofType(lines []line, typ string) []line {
	var out []line
	for _, l := range lines {
		if l["type"] == typ {
			out = append(out, l)
		}
	}
	return out
}
