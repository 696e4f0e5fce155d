package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func readReport(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, data)
	}
	for _, key := range []string{"exit_code", "timed_out", "oom_killed", "wall_time_seconds", "landlock_abi", "cgroup_version", "protections", "peak_memory_bytes"} {
		if _, ok := rep[key]; !ok {
			t.Errorf("report has no %q: %s", key, data)
		}
	}
	return rep
}

func TestReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	r := tent(t, "run", "--report", path, "--", "sh", "-c", "exit 3")
	r.expect(t, 3)
	rep := readReport(t, path)
	if rep["exit_code"] != 3.0 || rep["timed_out"] != false || rep["oom_killed"] != false {
		t.Errorf("report: %v", rep)
	}
	if w, _ := rep["wall_time_seconds"].(float64); w <= 0 || w > 30 {
		t.Errorf("wall_time_seconds = %v", rep["wall_time_seconds"])
	}
	if abi, _ := rep["landlock_abi"].(float64); abi < 1 {
		t.Errorf("landlock_abi = %v", rep["landlock_abi"])
	}
	if v, _ := rep["cgroup_version"].(string); v == "" {
		t.Errorf("cgroup_version = %v", rep["cgroup_version"])
	}
	prots, _ := rep["protections"].([]any)
	names := map[string]string{}
	for _, p := range prots {
		p := p.(map[string]any)
		names[p["name"].(string)], _ = p["status"].(string)
	}
	for _, n := range []string{"user namespace", "network namespace", "seccomp", "landlock"} {
		if names[n] == "" {
			t.Errorf("protections lack %q: %v", n, names)
		}
	}

	// Overwritten atomically on the next run, also when it times out.
	r = tent(t, "run", "--report", path, "--timeout", "200ms", "--", "sleep", "5")
	r.expect(t, 124)
	if rep := readReport(t, path); rep["timed_out"] != true || rep["exit_code"] != 124.0 {
		t.Errorf("report after a timeout: %v", rep)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("report directory holds %d entries, want only report.json", len(entries))
	}

	r = tent(t, "run", "--report", filepath.Join(dir, "missing", "r.json"), "--", "true")
	r.expect(t, 125, "tent: --report: ")
}

func TestSeccompDockerProfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	r := tent(t, "run", "--seccomp", testdata(t, "docker-default-seccomp.json"), "--report", path, "--", "/bin/true")
	r.expect(t, 0)
	found := false
	for _, p := range readReport(t, path)["protections"].([]any) {
		p := p.(map[string]any)
		if p["name"] == "seccomp" {
			found = p["status"] == "enforced" && strings.Contains(p["detail"].(string), "custom")
		}
	}
	if !found {
		t.Errorf("report does not show the custom seccomp profile enforced")
	}
	bad := writeFile(t, filepath.Join(dir, "bad.json"), `{"defaultAction": "SCMP_ACT_NOPE"}`)
	tent(t, "run", "--seccomp", bad, "--", "true").expect(t, 125, "tent: --seccomp: ", "defaultAction")
}

// With --best-effort, every protection that is not enforced (and not
// turned off by the user) is a warning; user choices are not.
func TestBestEffortWarnings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.json")
	r := tent(t, "run", "--best-effort", "--memory", "64M", "--pids", "64", "--net", "host", "--seccomp", "unconfined", "--report", path, "--", "true")
	r.expect(t, 0)
	for _, p := range readReport(t, path)["protections"].([]any) {
		p := p.(map[string]any)
		name, status := p["name"].(string), p["status"].(string)
		warning := "tent: warning: " + name + ": "
		userChoice := name == "network namespace" || name == "seccomp"
		if want := status != "enforced" && !userChoice; want != strings.Contains(r.stderr, warning) {
			t.Errorf("protection %s is %s; warning printed: %v (stderr %q)", name, status, !want, r.stderr)
		}
	}
}

func TestSignalsAreForwarded(t *testing.T) {
	t.Parallel()
	for sig, code := range map[syscall.Signal]int{syscall.SIGINT: 7, syscall.SIGTERM: 8, syscall.SIGUSR1: 9} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			// The script says when its traps are set, so a slow start
			// cannot make the signal arrive first.
			script := `trap "exit 7" INT; trap "exit 8" TERM; trap "exit 9" USR1; echo ready; sleep 60 & wait`
			cmd := exec.Command(tentBin, "run", "--", "sh", "-c", script)
			cmd.Env = baseEnv()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("read %q, %v; stderr: %s", line, err, stderr.String())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != code {
				t.Errorf("tent ended with %v, want exit status %d; stderr: %s", err, code, stderr.String())
			}
			// Not forwarded, the script would end with sleep's status, 0,
			// a minute later: the status says it was, at no assumed speed.
		})
	}
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	r := tent(t, "doctor", "--json")
	var rep struct {
		Checks []struct{ Name, Status, Detail, Fix string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("tent doctor --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	missing := false
	for _, c := range rep.Checks {
		missing = missing || c.Status == "missing"
	}
	if len(rep.Checks) == 0 || (r.code == 1) != missing || (r.code != 0 && r.code != 1) {
		t.Errorf("doctor exited %d with checks %+v", r.code, rep.Checks)
	}
	text := tent(t, "doctor")
	if text.code != r.code || !strings.Contains(text.stdout, "landlock") || !strings.Contains(text.stdout, "seccomp") {
		t.Errorf("tent doctor exited %d:\n%s%s", text.code, text.stdout, text.stderr)
	}
}

// --report - prints the report on stdout; a FIFO or device is written in
// place, never replaced by a renamed file.
func TestReportToStdoutAndDevices(t *testing.T) {
	r := tent(t, "run", "--report", "-", "--", "true")
	r.expect(t, 0)
	var rep struct {
		Tier     string `json:"tier"`
		ExitCode *int   `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Tier == "" {
		t.Fatalf("--report - printed %q (%v)", r.stdout, err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	tent(t, "run", "--report", fifo, "--", "true").expect(t, 0)
	if b := <-got; !json.Valid(b) {
		t.Errorf("the FIFO got %q", b)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
}
