package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "vars.env"), "FROM_FILE=yes\nB=file\n")
	policies := map[string]string{
		"p.yaml": "hostname: a\nenv_file: [vars.env]\nenv: {B: policy}\nenv_pass: [" + marker + "]\ntimeout: 30s\nnofile: 256\n",
		"p.json": `{"hostname": "a", "env_file": ["vars.env"], "env": ["B=policy"], "env_pass": ["` + marker + `"], "timeout": "30s", "nofile": 256}`,
	}
	for name, doc := range policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, filepath.Join(dir, name), doc)
			// Run from another directory: env_file is relative to the policy.
			r := invocation{args: []string{"run", "--policy", path, "--", "sh", "-c", `echo "$(hostname) $FROM_FILE $B $` + marker + ` $(ulimit -n)"`}, dir: t.TempDir()}.run(t)
			r.expect(t, 0)
			if got := strings.TrimSpace(r.stdout); got != "a yes policy leaked 256" {
				t.Errorf("with policy only: %q, want %q", got, "a yes policy leaked 256")
			}
			r = tent(t, "run", "--policy", path, "--hostname", "b", "--env", "B=flag", "--", "sh", "-c", `echo "$(hostname) $B"`)
			r.expect(t, 0)
			if got := strings.TrimSpace(r.stdout); got != "b flag" {
				t.Errorf("flags over policy: %q, want %q", got, "b flag")
			}
			r = tent(t, "run", "--policy", path, "--timeout", "200ms", "--", "sleep", "10")
			r.expect(t, 124, "tent: timed out after 200ms")
		})
	}
}

func TestPolicyErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown.yaml": {"hostname: a\nbogus_key: 1\n", `line 2: unknown key "bogus_key"`},
		"unknown.json": {`{"hostname": "a", "bogus_key": 1}`, `unknown key "bogus_key"`},
		"memory.yaml":  {"memory: -1\n", `tent: policy memory: "-1": size is negative`},
		"net.json":     {`{"net": "wifi"}`, `tent: policy net: unknown net mode "wifi"`},
		"syntax.json":  {`{"hostname": "a",}`, "invalid JSON"},
		"mount.yaml":   {"ro: [\"/tmp:/proc\"]\n", `"/proc" is reserved`},
	} {
		path := writeFile(t, filepath.Join(dir, name), tc.doc)
		r := tent(t, "run", "--policy", path, "--", "true")
		r.expect(t, 125, "tent: ", tc.want)
		if strings.HasPrefix(name, "unknown") {
			r.expect(t, 125, "tent: policy "+path+": ")
		}
	}
}

// A --ro flag replaces a policy mount with the same target instead of
// colliding with it.
func TestFlagMountOverridesPolicyMount(t *testing.T) {
	t.Parallel()
	var dirs [2]string
	for i, content := range []string{"policy", "flag"} {
		dirs[i] = t.TempDir()
		if err := os.Chmod(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dirs[i], "f"), content)
	}
	policy := writeFile(t, filepath.Join(t.TempDir(), "p.yaml"), "mounts: [{source: "+dirs[0]+", target: /data}]\nworkdir: /data\n")
	r := tent(t, "run", "--policy", policy, "--", "cat", "f")
	r.expect(t, 0)
	if r.stdout != "policy" {
		t.Errorf("policy mount: read %q", r.stdout)
	}
	r = tent(t, "run", "--policy", policy, "--ro", dirs[1]+":/data", "--", "cat", "/data/f")
	r.expect(t, 0)
	if r.stdout != "flag" {
		t.Errorf("flag mount over policy mount: read %q", r.stdout)
	}
}
