//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// Every exec of a long-lived sandbox carries the same restrictions as a
// one-shot command, including the execs forked from the init's kept
// restricted thread (every exec after the first).
func TestSandboxExecsAreRestricted(t *testing.T) {
	sb := provision(t, withProbe(t, sandbox.Spec{}))
	host := landlockProbeDir(t)
	for i := range 3 {
		out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"grep", "-E", "^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):", "/proc/self/status"}})
		if res.ExitCode != 0 {
			t.Fatalf("exec %d: exit %d", i, res.ExitCode)
		}
		got := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			k, v, _ := strings.Cut(l, ":")
			got[k] = strings.TrimSpace(v)
		}
		for k, v := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
			if got[k] != v {
				t.Errorf("exec %d: %s = %q, want %q", i, k, got[k], v)
			}
		}
		// Landlock: no file can be created in a host directory given as
		// stdin, though DAC and the mount would allow it.
		var verdict bytes.Buffer
		if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{probeTarget + "/testprobe", "open", "/proc/self/fd/0/x", "c"}, Stdin: host, Stdout: &verdict}); err != nil {
			t.Fatal(err)
		}
		expect(t, "create a file in a host directory given as stdin", strings.TrimSpace(verdict.String()), "EACCES")
		if ents, _ := os.ReadDir(host.Name()); len(ents) != 0 {
			t.Fatalf("exec %d: the host directory got %v", i, ents)
		}
		// Its own cgroup namespace.
		cg, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", "/proc/self/cgroup"}})
		for _, l := range strings.Split(cg, "\n") {
			if !strings.HasSuffix(l, ":/") {
				t.Errorf("exec %d: cgroup line %q: not in a cgroup namespace rooted at its cgroup", i, l)
			}
		}
	}
	// The file helper and the rlimit trampoline exec the host binary from
	// the kept thread too.
	if _, err := sb.WriteFile(context.Background(), "/tmp/x", strings.NewReader("hello"), sandbox.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := sb.ReadFile(context.Background(), "/tmp/x", &b, sandbox.ReadOptions{}); err != nil || b.String() != "hello" {
		t.Fatalf("ReadFile: %q, %v", b.String(), err)
	}
	lim := provision(t, sandbox.Spec{Limits: sandbox.Limits{NoFile: 16}})
	for range 2 {
		if out, _ := execOut(t, lim, sandbox.ExecRequest{Args: []string{"sh", "-c", "ulimit -n"}}); out != "16" {
			t.Errorf("ulimit -n = %q, want 16", out)
		}
	}
}
