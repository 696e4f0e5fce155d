package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

const policyYAML = `# every key
mounts:
  - {source: ./src, target: /work, access: rw}
  - source: /etc/hostname
ro: ["/data:/data"]
rw: ["./out"]
workdir: /work
net: host
memory: 256M
pids: 64
cpus: 1.5
timeout: 30s
nofile: 1024
env_file: [.env]
env_pass: [PASSED, UNSET]
env: {B: 2, A: "1", EMPTY: }
env_inherit: true
user: 1000:100
hostname: box
sysctls: {kernel.shm_rmid_forced: "1", net.ipv4.ip_local_port_range: "20000 30000"}
seccomp: unconfined
best_effort: true
`

const policyJSON = `{
  "mounts": [{"source": "./src", "target": "/work", "access": "rw"}, {"source": "/etc/hostname"}],
  "ro": ["/data:/data"], "rw": ["./out"], "workdir": "/work", "net": "host",
  "memory": 268435456, "pids": 64, "cpus": 1.5, "timeout": "30s", "nofile": 1024,
  "env_file": [".env"], "env_pass": ["PASSED", "UNSET"], "env": {"B": 2, "A": "1", "EMPTY": null},
  "env_inherit": true, "user": "1000:100", "hostname": "box", "sysctls": {"kernel.shm_rmid_forced": "1", "net.ipv4.ip_local_port_range": "20000 30000"}, "seccomp": "unconfined", "best_effort": true
}`

func getenv(name string) (string, bool) {
	if name == "PASSED" {
		return "from-caller", true
	}
	return "", false
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicyJSONAndYAMLAgree(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".env"), "FROM_FILE=1\nA=overridden-by-env\n")
	want := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: filepath.Join(dir, "src"), Target: "/work", Access: sandbox.ReadWrite},
				{Source: "/etc/hostname", Target: "/etc/hostname", Access: sandbox.ReadOnly},
				{Source: "/data", Target: "/data", Access: sandbox.ReadOnly},
				{Source: filepath.Join(dir, "out"), Target: filepath.Join(dir, "out"), Access: sandbox.ReadWrite},
			},
		},
		Identity: sandbox.Identity{
			Workdir:    "/work",
			Env:        []string{"FROM_FILE=1", "A=overridden-by-env", "PASSED=from-caller", "A=1", "B=2", "EMPTY="},
			EnvInherit: true,
			User:       &sandbox.User{UID: 1000, GID: 100},
			Hostname:   "box",
		},
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Host},
		},
		Limits:     sandbox.Limits{Memory: 256 << 20, Pids: 64, CPUs: 1.5, Timeout: 30 * time.Second, NoFile: 1024},
		Sysctls:    map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_local_port_range": "20000 30000"},
		Seccomp:    sandbox.Seccomp{Unconfined: true},
		BestEffort: true,
	}
	for name, content := range map[string]string{"p.yaml": policyYAML, "p.yml": policyYAML, "p.json": policyJSON, "p.conf": policyJSON, "policy": policyYAML} {
		p, err := policy.Load(writeFile(t, filepath.Join(dir, name), content))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Dir != dir {
			t.Errorf("%s: Dir = %q; want %q", name, p.Dir, dir)
		}
		var got sandbox.Spec
		if err := p.Apply(&got, getenv); err != nil {
			t.Fatalf("%s: Apply: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Apply =\n%+v\nwant\n%+v", name, got, want)
		}
	}
}

func TestPolicyEmptyAndPartial(t *testing.T) {
	for _, doc := range []string{"", "  \n", "# nothing\n", "{}"} {
		p, err := policy.Parse([]byte(doc), doc == "{}")
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		spec := sandbox.Spec{Identity: sandbox.Identity{Hostname: "kept", Env: []string{"X=1"}}}
		if err := p.Apply(&spec, getenv); err != nil {
			t.Fatal(err)
		}
		if spec.Hostname != "kept" || len(spec.Env) != 1 {
			t.Errorf("%q: an empty policy changed the spec: %+v", doc, spec)
		}
	}
	p, err := policy.Parse([]byte("env: [X=2, Y=3]\nseccomp: default\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Identity: sandbox.Identity{Env: []string{"X=1"}}, Seccomp: sandbox.Seccomp{Unconfined: true}}
	if err := p.Apply(&spec, getenv); err != nil {
		t.Fatal(err)
	}
	if strings.Join(spec.Env, " ") != "X=1 X=2 Y=3" || spec.Seccomp.Unconfined {
		t.Errorf("Apply = %+v", spec)
	}
}

func TestPolicySeccompProfileRelativeToFile(t *testing.T) {
	dir := t.TempDir()
	profile, err := os.ReadFile("../../seccomp/testdata/docker-default.json")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "docker.json"), string(profile))
	p, err := policy.Load(writeFile(t, filepath.Join(dir, "p.yaml"), "seccomp: docker.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	var spec sandbox.Spec
	if err := p.Apply(&spec, getenv); err != nil {
		t.Fatal(err)
	}
	if spec.Seccomp.Profile == nil || spec.Seccomp.Unconfined {
		t.Errorf("seccomp = %+v; want the loaded profile", spec.Seccomp)
	}
}

func TestPolicyDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"p.yaml", "hostname: a\nbogus: 1\n", `line 2: unknown key "bogus"`},
		{"p.json", `{"hostname": "a", "bogus": 1}`, `unknown key "bogus"`},
		{"p.yaml", "mounts: [{source: /x, mode: rw}]\n", `line 1: unknown key "mode"`},
		{"p.json", `{"mounts": [{"source": "/x", "mode": "rw"}]}`, `unknown key "mode"`},
		{"p.yaml", "pids: many\n", "line 1: cannot unmarshal"},
		{"p.json", `{"pids": "many"}`, "pids: cannot use a JSON string as int64"},
		{"p.json", `{"hostname": "a"} {}`, "unexpected data after the JSON object"},
		{"p.json", `{"hostname": `, "invalid JSON"},
		{"p.yaml", "hostname: [\n", "invalid YAML"},
		{"p.yaml", "hostname: a\nhostname: b\n", "already defined"},
		{"p.yaml", "env: 3\n", "env: want a mapping"},
		{"p.json", `{"env": 3}`, "want an object"},
		{"p.json", `{"memory": true}`, "want a string or a number"},
	} {
		path := writeFile(t, filepath.Join(t.TempDir(), tc.name), tc.doc)
		_, err := policy.Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "policy "+path+": ") {
			t.Errorf("%s %q: err = %v; want %q", tc.name, tc.doc, err, tc.want)
		}
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s %q: %v does not match ErrInvalidSpec", tc.name, tc.doc, err)
		}
	}
	_, err := policy.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("missing file: %v", err)
	}
}

func TestPolicyApplyErrorsNameTheKey(t *testing.T) {
	for doc, want := range map[string]string{
		"memory: -1":                          `policy memory: "-1": size is negative`,
		"memory: 1.5G":                        `policy memory: "1.5G": fractional`,
		"timeout: -2s":                        `policy timeout: "-2s": duration is negative`,
		"timeout: 30":                         `policy timeout: "30": not a duration`,
		"pids: -1":                            `policy pids: "-1": must not be negative`,
		"cpus: -0.5":                          `policy cpus: "-0.5": want a positive number`,
		"user: root":                          `policy user: "root": uid: not a number`,
		"net: wifi":                           `policy net: unknown net mode "wifi"`,
		"mounts: [{target: /x}]":              `policy mounts[0]: source is missing`,
		"mounts: [{source: /x, access: cow}]": `policy mounts[0].access: "cow": want ro or rw`,
		"ro: ['']":                            `policy ro[0]: invalid mount`,
		"env: [NOVALUE]":                      `policy env[0]: "NOVALUE": not KEY=VALUE`,
		"env: {1X: a}":                        `policy env[0]: "1X=a": invalid variable name "1X"`,
		"env_pass: [A-B]":                     `policy env_pass[0]: "A-B": not a variable name`,
		"env_file: [missing.env]":             `policy env_file[0]: failed to read env file`,
		"seccomp: missing.json":               `policy seccomp: failed to read seccomp profile`,
	} {
		dir := t.TempDir()
		p, err := policy.Load(writeFile(t, filepath.Join(dir, "p.yaml"), doc+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		err = p.Apply(&sandbox.Spec{}, getenv)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: err = %v; want prefix %q", doc, err, want)
		}
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%q: %v does not match ErrInvalidSpec", doc, err)
		}
	}
}

func TestPolicyEnvFileErrorNamesLine(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.env"), "A=1\nnot valid\n")
	p := &policy.Policy{EnvFile: []string{"bad.env"}, Dir: dir}
	err := p.Apply(&sandbox.Spec{}, getenv)
	if err == nil || !strings.Contains(err.Error(), "bad.env: line 2:") {
		t.Errorf("err = %v; want the file and line 2 named", err)
	}
}

func TestPolicySecrets(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key.txt"), []byte("file-value-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Dir: dir, Secrets: []policy.Secret{
		{Name: "A", Hosts: []string{"a.example"}, File: "key.txt", InURL: true},
		{Name: "B", Hosts: []string{"b.example"}, Env: "OTHER"},
	}}
	var spec sandbox.Spec
	env := func(k string) (string, bool) {
		return map[string]string{"OTHER": "env-value-0123456789"}[k], k == "OTHER"
	}
	if err := p.Apply(&spec, env); err != nil {
		t.Fatal(err)
	}
	s := spec.Network.Secrets
	if spec.Network.Mode != "limited" || len(s) != 2 || s[0].Value != "file-value-0123456789" || !s[0].InURL || s[1].Value != "env-value-0123456789" || s[1].Hosts[0] != "b.example" {
		t.Errorf("spec network %+v", spec.Network)
	}
	// A template (no environment) reads files, never variables.
	var tmpl sandbox.Spec
	err := p.Apply(&tmpl, nil)
	if err == nil || !strings.Contains(err.Error(), "secrets[1] (B)") || !strings.Contains(err.Error(), "give file") {
		t.Errorf("a variable with no environment: %v", err)
	}
	p.Secrets = p.Secrets[:1]
	tmpl = sandbox.Spec{}
	if err := p.Apply(&tmpl, nil); err != nil || tmpl.Network.Secrets[0].Value != "file-value-0123456789" {
		t.Errorf("a file secret in a template: %v %+v", err, tmpl.Network.Secrets)
	}
	p.Secrets = []policy.Secret{{Name: "C", Hosts: []string{"c.example"}, File: "key.txt", Env: "OTHER"}}
	if err := p.Apply(&sandbox.Spec{}, env); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("env and file: %v", err)
	}
}
