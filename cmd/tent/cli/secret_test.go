package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

const cliSecret = "cli-REAL-secret-0123456789abcdef"

func TestSecretFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	report, netLog := filepath.Join(dir, "report.json"), filepath.Join(dir, "net.jsonl")
	r := invocation{args: []string{"run", "--secret", "TOKEN@api.example.com", "--report", report, "--net-log", netLog,
		"--", "sh", "-c", `echo "$TOKEN"; cat /proc/self/environ | tr '\0' '\n' | grep -c "` + cliSecret + `"; test -s "$SSL_CERT_FILE" && grep -c BEGIN "$TENT_CA_CERT"`},
		env: []string{"TOKEN=" + cliSecret}}.run(t)
	// grep -c finds 0 lines of the value (exit 1 would end the script; the
	// last grep counts the CA's one certificate).
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "tent_") || lines[1] != "0" || lines[2] != "1" {
		t.Errorf("stdout %q, want a placeholder, 0 and 1", r.stdout)
	}
	for _, f := range []string{report, netLog} {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), cliSecret) {
			t.Errorf("%s holds the value", f)
		}
	}
	if strings.Contains(r.stdout+r.stderr, cliSecret) {
		t.Error("the output holds the value")
	}
}

// --env-inherit brings tent's environment in, where --secret found the
// value: the variable still holds a placeholder, in both tiers.
func TestSecretWithInheritedEnvironment(t *testing.T) {
	t.Parallel()
	for _, tier := range [][]string{{"--tier", "full"}, {"--tier", "reduced", "--best-effort"}} {
		args := append(append([]string{"run"}, tier...), "--env-inherit", "--secret", "TOKEN@api.example.com", "--", "sh", "-c", `echo "$TOKEN"`)
		r := invocation{args: args, env: []string{"TOKEN=" + cliSecret}}.run(t)
		r.expect(t, 0)
		if !strings.HasPrefix(r.stdout, "tent_") || strings.Contains(r.stdout, cliSecret) {
			t.Errorf("%v: stdout %q, want the placeholder", tier, r.stdout)
		}
	}
}

func TestSecretFlagRefusals(t *testing.T) {
	t.Parallel()
	r := tent(t, "run", "--secret", "TOKEN="+cliSecret+"@api.example.com", "--", "true")
	r.expect(t, 125, "command line")
	if strings.Contains(r.stderr, cliSecret) {
		t.Errorf("the error repeats the value: %s", r.stderr)
	}
	tent(t, "run", "--secret", "UNSET_VAR_XYZ@api.example.com", "--", "true").expect(t, 125, "UNSET_VAR_XYZ is set neither")
	tent(t, "run", "--secret", "TOKEN", "--", "true").expect(t, 125, "NAME@HOST")
	invocation{args: []string{"run", "--secret", "TOKEN@10.0.0.1", "--", "true"}, env: []string{"TOKEN=x-0123456789"}}.run(t).expect(t, 125, "not IP addresses")
	invocation{args: []string{"run", "--net", "none", "--secret", "TOKEN@a.example", "--", "true"}, env: []string{"TOKEN=x-0123456789"}}.run(t).expect(t, 125, "limited")
	dir := t.TempDir()
	loose := writeFile(t, filepath.Join(dir, "loose.env"), "TOKEN="+cliSecret+"\n")
	os.Chmod(loose, 0o644)
	tent(t, "run", "--secret-file", loose, "--secret", "TOKEN@a.example", "--", "true").expect(t, 125, "chmod 600")
	tight := writeFile(t, filepath.Join(dir, "tight.env"), "TOKEN="+cliSecret+"\n")
	os.Chmod(tight, 0o600)
	r = tent(t, "run", "--secret-file", tight, "--secret", "TOKEN@a.example", "--", "sh", "-c", `echo "$TOKEN"`)
	r.expect(t, 0)
	if !strings.HasPrefix(r.stdout, "tent_") {
		t.Errorf("stdout %q, want the placeholder", r.stdout)
	}
}

// tent mcp's operator gives a secret: the model's commands see the
// placeholder, network_status names the variable and its hosts, and the
// value is in nothing the server or its supervisors write but the state
// directory's secret store (mode 0600).
func TestMCPSecret(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(tentBin, "--state-dir", state, "mcp", "--secret", "TOKEN@api.example.com")
	cmd.Env = append(baseEnv(), "TOKEN="+cliSecret)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs := mcpClient(t, &sdk.CommandTransport{Command: cmd})
	var r struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	mcpCall(t, cs, "shell", map[string]any{"command": `echo "$TOKEN"`}, &r)
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "tent_") {
		t.Errorf("shell: %+v\n%s", r, stderr.String())
	}
	var n struct {
		Secrets []struct {
			Variable string
			Hosts    []string
		}
	}
	mcpCall(t, cs, "network_status", map[string]any{}, &n)
	if len(n.Secrets) != 1 || n.Secrets[0].Variable != "TOKEN" || len(n.Secrets[0].Hosts) != 1 || n.Secrets[0].Hosts[0] != "api.example.com" {
		t.Errorf("network_status secrets: %+v", n.Secrets)
	}
	cs.Close()
	storeOnly(t, state)
	filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && path != filepath.Join(state, secretstore.FileName) {
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), cliSecret) {
				t.Errorf("%s holds the value", path)
			}
		}
		return nil
	})
	if strings.Contains(stderr.String()+r.Stdout, cliSecret) {
		t.Error("the server's output holds the value")
	}
}

// A long-lived sandbox: its execs get the placeholder, and nothing its
// supervisor writes (the record, tent inspect, a snapshot, the log) holds
// the value, which is in the state directory's secret store only; a fork
// from the snapshot names the same secret, with the same placeholder.
func TestSecretInLongLivedSandbox(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	r := invocation{args: []string{"--state-dir", l.dir, "create", "--name", "sec", "--secret", "TOKEN@api.example.com",
		"--allow-host", "GET api.example.com/repos/"}, env: []string{"TOKEN=" + cliSecret}}.run(t)
	r.expect(t, 0)
	id := strings.TrimSpace(r.stdout)
	out := l.tent(t, "exec", id, "--", "sh", "-c", `echo "$TOKEN"; cat /run/tent/ca/ca.pem | head -1`)
	out.expect(t, 0)
	if f := strings.Split(strings.TrimSpace(out.stdout), "\n"); len(f) != 2 || !strings.HasPrefix(f[0], "tent_") || f[1] != "-----BEGIN CERTIFICATE-----" {
		t.Errorf("exec: %q", out.stdout)
	}
	insp := l.tent(t, "inspect", "-o", "json", id)
	insp.expect(t, 0)
	if !strings.Contains(insp.stdout, `"name": "TOKEN"`) && !strings.Contains(insp.stdout, `"name":"TOKEN"`) {
		t.Errorf("inspect does not name the secret: %s", insp.stdout)
	}
	l.tent(t, "snapshot", id).expect(t, 0)
	snaps := l.tent(t, "snapshot", "ls", "-q")
	snaps.expect(t, 0)
	for _, r := range []result{insp, out, snaps} {
		if strings.Contains(r.stdout+r.stderr, cliSecret) {
			t.Errorf("output holds the value: %s%s", r.stdout, r.stderr)
		}
	}
	files := 0
	filepath.WalkDir(l.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || path == filepath.Join(l.dir, secretstore.FileName) {
			return nil
		}
		files++
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), cliSecret) {
			t.Errorf("%s holds the value", path)
		}
		return nil
	})
	if files < 3 {
		t.Errorf("only %d files in the state directory", files)
	}
	snap := strings.Fields(snaps.stdout)
	if len(snap) != 1 {
		t.Fatalf("snapshots: %q", snaps.stdout)
	}
	storeOnly(t, l.dir)
	fork := l.tent(t, "fork", snap[0])
	fork.expect(t, 0)
	fid := strings.TrimSpace(fork.stdout)
	fout := l.tent(t, "exec", fid, "--", "sh", "-c", `echo "$TOKEN"`)
	fout.expect(t, 0)
	if ph := strings.Split(strings.TrimSpace(out.stdout), "\n")[0]; strings.TrimSpace(fout.stdout) != ph {
		t.Errorf("the fork's TOKEN is %q, its origin's %q", fout.stdout, ph)
	}
	l.tent(t, "rm", fid).expect(t, 0)
	l.tent(t, "rm", id).expect(t, 0)
}

// storeOnly checks that the secret store of state directory dir holds
// the value, and is readable by its owner only.
func storeOnly(t *testing.T, dir string) {
	t.Helper()
	storeOnlyValue(t, dir, cliSecret)
}

func TestSecretInPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key.txt"), cliSecret+"\n")
	pol := writeFile(t, filepath.Join(dir, "p.yaml"), "secrets:\n  - name: KEY\n    hosts: [api.example.com]\n    file: key.txt\n  - name: TOKEN\n    hosts: [api.example.com]\n")
	r := invocation{args: []string{"run", "--policy", pol, "--", "sh", "-c", `echo "$KEY $TOKEN"`}, env: []string{"TOKEN=" + cliSecret}}.run(t)
	r.expect(t, 0)
	if f := strings.Fields(r.stdout); len(f) != 2 || !strings.HasPrefix(f[0], "tent_") || !strings.HasPrefix(f[1], "tent_") || f[0] == f[1] {
		t.Errorf("stdout %q, want two placeholders", r.stdout)
	}
	pol = writeFile(t, filepath.Join(dir, "q.yaml"), "secrets:\n  - name: NOPE_UNSET\n    hosts: [api.example.com]\n")
	tent(t, "run", "--policy", pol, "--", "true").expect(t, 125, "NOPE_UNSET is not set")
}

// TestSecretSourceNeverEnters: the variable of tent's environment a
// policy secret's value is read from (env: SRCVAR), and any other
// holding the value, stay out of the sandbox under --env-inherit, in
// both tiers (env inside shows neither the value nor the variable); an
// environment option naming the source or the secret's own variable is
// refused, naming the option and the secret.
func TestSecretSourceNeverEnters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pol := writeFile(t, filepath.Join(dir, "p.yaml"), "secrets:\n  - name: TOKEN\n    hosts: [api.example.com]\n    env: SRCVAR\n")
	env := []string{"SRCVAR=" + cliSecret, "ALIAS=Bearer " + cliSecret, "PLAIN=kept"}
	for _, tier := range [][]string{{"--tier", "full"}, {"--tier", "reduced", "--best-effort"}} {
		args := append(append([]string{"run"}, tier...), "--env-inherit", "--policy", pol, "--", "env")
		r := invocation{args: args, env: env}.run(t)
		r.expect(t, 0)
		if strings.Contains(r.stdout, cliSecret) || strings.Contains(r.stdout, "SRCVAR=") || strings.Contains(r.stdout, "ALIAS=") ||
			!strings.Contains(r.stdout, "PLAIN=kept") || !strings.Contains(r.stdout, "TOKEN=tent_") {
			t.Errorf("%v: env inside:\n%s\nwant no SRCVAR, no ALIAS, no value; PLAIN and TOKEN's placeholder", tier, r.stdout)
		}
	}
	envFile := writeFile(t, filepath.Join(dir, "e.env"), "SRCVAR=x\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--env-pass", "SRCVAR"}, "--env-pass SRCVAR: secret TOKEN's value is read from SRCVAR"},
		{[]string{"--env", "SRCVAR=x"}, "--env SRCVAR: secret TOKEN's value is read from SRCVAR"},
		{[]string{"--env-file", envFile}, "e.env sets SRCVAR: secret TOKEN's value is read from SRCVAR"},
		{[]string{"--env-pass", "TOKEN"}, "--env-pass TOKEN: TOKEN is secret TOKEN's variable"},
	} {
		args := append(append([]string{"run", "--policy", pol}, c.args...), "--", "true")
		r := invocation{args: args, env: append(env, "TOKEN=other-0123456789")}.run(t)
		r.expect(t, 125, c.want)
		if strings.Contains(r.stderr, cliSecret) {
			t.Errorf("%v: the error repeats the value: %s", c.args, r.stderr)
		}
	}
	// Another variable holding the value, given explicitly: refused.
	other := writeFile(t, filepath.Join(dir, "o.env"), "OTHER=x"+cliSecret+"\n")
	r := invocation{args: []string{"run", "--policy", pol, "--env-file", other, "--", "true"}, env: env}.run(t)
	r.expect(t, 125, "env: OTHER holds the value of secret TOKEN")
	if strings.Contains(r.stderr, cliSecret) {
		t.Errorf("the error repeats the value: %s", r.stderr)
	}
	// --secret NAME@HOST reads NAME: --env-pass NAME is refused too.
	r = invocation{args: []string{"run", "--secret", "TOKEN@api.example.com", "--env-pass", "TOKEN", "--", "true"}, env: []string{"TOKEN=" + cliSecret}}.run(t)
	r.expect(t, 125, "--env-pass TOKEN: TOKEN is secret TOKEN's variable")
}
