// Package backendtest is the conformance suite of [sandbox.Backend]: one
// table of tests that every backend must pass, so that a frontend written
// against the interface behaves the same over each. Package sandbox runs
// it against [sandbox.Local], package supervised against its Backend; a
// new backend calls [Run] from its own tests.
//
// The tests start real sandboxes (the calling test binary must call
// sandbox.Init first, as any program that embeds tent does) and check
// what the interface documents: references and their sentinel errors, an
// exec's status, output and refusals, attached mounts, the files API,
// network rules, snapshots and forks, suspend where the backend can, stop
// and resume, that Terminate forgets the sandbox, and processes
// (Handle.Start): found again by pid from a second Handle, stdin, output
// from an offset and its ring's bound, signals, terminals, the list. Each
// leaves nothing behind: Run's caller gets a fresh backend per test and
// closes it.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// Run runs the suite. open returns a fresh backend for one test; it
// terminates (or lets the test's cleanup terminate) whatever that backend
// still holds when the test ends.
func Run(t *testing.T, open func(t *testing.T) sandbox.Backend) {
	for _, c := range []struct {
		name string
		f    func(t *testing.T, b sandbox.Backend)
	}{
		{"References", references},
		{"Exec", execs},
		{"InvalidSpec", invalidSpec},
		{"Mount", mounts},
		{"Files", files},
		{"FileInputFails", fileInputFails},
		{"FileVerbs", fileVerbs},
		{"FileSymlinks", fileSymlinks},
		{"FileHostile", fileHostile},
		{"FileWatch", fileWatch},
		{"NetworkPolicy", network},
		{"SnapshotFork", snapshotFork},
		{"SuspendResume", suspendResume},
		{"StopResume", stopResume},
		{"Terminate", terminate},
		{"CancelledContext", cancelled},
		{"Dial", dial},
		{"SetLimits", setLimits},
		{"Process", processes},
		{"ProcessSignalTTY", processSignalTTY},
		{"ProcessRing", processRing},
		{"ProcessFollow", processFollow},
		{"ProcessFollowCancel", processFollowCancel},
		{"ProcessStdinBound", processStdinBound},
		{"ExecIsAProcess", execIsAProcess},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, open(t)) })
	}
}

// on opens the sandbox ref names in b, failing the test otherwise.
func on(t *testing.T, b sandbox.Backend, ref string) sandbox.Handle {
	t.Helper()
	h, err := b.Open(context.Background(), ref)
	if err != nil {
		t.Fatalf("Open(%q): %v", ref, err)
	}
	return h
}

// get describes the sandbox ref names in b: Open, then Info.
func get(ctx context.Context, b sandbox.Backend, ref string) (sandbox.Info, error) {
	h, err := b.Open(ctx, ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	return h.Info(ctx)
}

// provision provisions spec on b, failing the test on error.
func provision(t *testing.T, b sandbox.Backend, spec sandbox.Spec) sandbox.Info {
	t.Helper()
	info, err := b.Provision(context.Background(), spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return info
}

// out runs argv in sandbox id and returns its trimmed stdout, failing the
// test unless it exits 0.
func out(t *testing.T, b sandbox.Backend, id string, argv ...string) string {
	t.Helper()
	var stdout bytes.Buffer
	res, err := on(t, b, id).Exec(context.Background(), sandbox.ExecRequest{Args: argv, Stdout: &stdout})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %+v, %v", argv, res, err)
	}
	return strings.TrimSpace(stdout.String())
}

// A sandbox is found by its id and by a unique prefix of it, is listed,
// and is reported running; an unknown reference is ErrNotFound.
func references(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{Identity: sandbox.Identity{Hostname: "box", Env: []string{"GREETING=hi"}}})
	if s.State != sandbox.StateRunning || s.ID == "" || s.Backend != b.Name() {
		t.Fatalf("provisioned %+v", s)
	}
	if got := out(t, b, s.ID[:6], "sh", "-c", "echo $GREETING $(hostname)"); got != "hi box" {
		t.Errorf("exec by prefix: %q, want the spec's env and hostname", got)
	}
	if got, err := get(ctx, b, s.ID[:6]); err != nil || got.ID != s.ID || got.Spec.Hostname != "box" {
		t.Errorf("Get by prefix: %+v, %v", got, err)
	}
	for _, ref := range []string{"zz", s.ID + "0"} {
		if _, err := get(ctx, b, ref); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", ref, err)
		}
		if _, err := b.Open(ctx, ref); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Open(%q): %v, want ErrNotFound", ref, err)
		}
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID {
		t.Errorf("List: %+v, %v; want the one sandbox", list, err)
	}
}

// An exec's status is its result, not an error; what keeps it from
// starting is an error with the matching sentinel; its stdio is
// streamed, captured and capped as ExecRequest says.
func execs(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	res, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("exit 3: %+v, %v; want status 3 and the captured output", res, err)
	}
	res, err = on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"cat"}, Stdin: strings.NewReader("piped")})
	if err != nil || string(res.Stdout) != "piped" {
		t.Errorf("stdin: %+v, %v", res, err)
	}
	res, err = on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "pwd; echo $A"}, Dir: "/tmp", Env: []string{"A=b"}})
	if err != nil || string(res.Stdout) != "/tmp\nb\n" {
		t.Errorf("dir and env: %+v, %v", res, err)
	}
	res, err = on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "head -c 100 /dev/zero"}, MaxOutput: 10})
	if err != nil || len(res.Stdout) != 10 || !res.StdoutTruncated {
		t.Errorf("MaxOutput 10: %d bytes, truncated %v, %v", len(res.Stdout), res.StdoutTruncated, err)
	}
	res, err = on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sleep", "10"}, Timeout: 100 * time.Millisecond})
	if err != nil || !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("timeout: %+v, %v; want TimedOut and 124", res, err)
	}
	if _, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"/nonexistent"}}); !errors.Is(err, sandbox.ErrCommandNotFound) {
		t.Errorf("missing command: %v, want ErrCommandNotFound", err)
	}
	if _, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}, Dir: "/nonexistent"}); !errors.Is(err, sandbox.ErrWorkDir) || !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("missing workdir: %v, want ErrWorkDir and ErrInvalidSpec", err)
	}
	if _, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("no args: %v, want ErrInvalidSpec", err)
	}
	// AsRoot: uid and gid 0 in the command's view, the sandbox user's
	// (1000 here) on disk, no capability; the caller's environment and
	// stdin reach it.
	s = provision(t, b, sandbox.Spec{Identity: sandbox.Identity{User: &sandbox.User{UID: 1000, GID: 1000}}})
	user := out(t, b, s.ID, "sh", "-c", "id -u")
	if user != "1000" {
		t.Fatalf("the sandbox user is %s, want 1000", user)
	}
	res, err = on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "id -u; id -g; read l; echo $l $A; grep CapEff /proc/self/status; touch /tmp/by-root"},
		AsRoot: true, Env: []string{"A=b"}, Stdin: strings.NewReader("in\n")})
	if err != nil {
		t.Errorf("AsRoot: %v", err)
	} else if string(res.Stdout) != "0\n0\nin b\nCapEff:\t0000000000000000\n" {
		t.Errorf("AsRoot: %+v (stdout %q)", res, res.Stdout)
	}
	if got := out(t, b, s.ID, "stat", "-c", "%u", "/tmp/by-root"); got != user {
		t.Errorf("a file root made is owned by %s, want the sandbox user's %s", got, user)
	}
}

// A malformed spec is ErrInvalidSpec and leaves no sandbox.
func invalidSpec(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	for _, spec := range []sandbox.Spec{
		{Identity: sandbox.Identity{Workdir: "relative"}},
		{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: "/nonexistent-tent-source", Target: "/x"}}}},
		{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: t.TempDir(), Target: "/proc/x"}}}},
		{Limits: sandbox.Limits{Pids: -1}},
	} {
		if _, err := b.Provision(ctx, spec); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Provision(%+v): %v, want ErrInvalidSpec", spec, err)
		}
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List after refusals: %+v, %v; want none", list, err)
	}
}

// A mount added to a running sandbox is validated as at provision time
// and seen by the next exec.
func mounts(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("attached"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []sandbox.Mount{
		{Source: dir, Target: "/proc/x"},
		{Source: dir, Target: "relative"},
		{Source: "/nonexistent-tent-source", Target: "/x"},
		{Source: dir, Target: "/x", Access: "rwx"},
	} {
		if err := on(t, b, s.ID).Mount(ctx, m); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Mount(%+v): %v, want ErrInvalidSpec", m, err)
		}
	}
	if err := on(t, b, s.ID).Mount(ctx, sandbox.Mount{Source: dir, Target: "/data", Access: sandbox.ReadOnly}); err != nil {
		t.Fatalf("Mount of a valid ro mount: %v", err)
	}
	if got := out(t, b, s.ID, "cat", "/data/f"); got != "attached" {
		t.Errorf("reading the attached mount: %q", got)
	}
	if err := on(t, b, s.ID).Mount(ctx, sandbox.Mount{Source: dir, Target: "/data"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a second mount at /data: %v, want ErrInvalidSpec", err)
	}
	res, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo x > /data/g"}})
	if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only file system") {
		t.Errorf("writing the ro mount: %+v, %v; want EROFS", res, err)
	}
}

// Mode none's policy cannot change; a limited sandbox's rules can, and
// Get reports them; a bad rule is ErrInvalidSpec.
func network(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	none := provision(t, b, sandbox.Spec{})
	if err := on(t, b, none.ID).SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.com"}}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("rules for a mode-none sandbox: %v, want ErrUnsupported", err)
	}
	lim := provision(t, b, sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.com"}}}})
	p := sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.org"}, DeniedHosts: []string{"bad.example.org"}}
	if err := on(t, b, lim.ID).SetNetworkPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, err := get(ctx, b, lim.ID); err != nil || len(got.Spec.Network.AllowedHosts) != 1 || got.Spec.Network.AllowedHosts[0] != "example.org" || got.Spec.Network.DeniedHosts[0] != "bad.example.org" {
		t.Errorf("Get after the change: %+v, %v", got.Spec.Network, err)
	}
	if err := on(t, b, lim.ID).SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"*"}}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("an allowlist of *: %v, want ErrInvalidSpec", err)
	}
	// Header transforms are rules: replaced (their values reach the
	// proxy: a value under 8 bytes is refused) and removed at run time;
	// variables are kept and cannot be added.
	header := func(v string) netpolicy.Secret {
		return netpolicy.Secret{Name: "RULE_1", Hosts: []string{"api.example.com"}, Header: "X-Token", Value: v}
	}
	variable := netpolicy.Secret{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: "variable-value-0123"}
	spec := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"api.example.com"}, Secrets: []netpolicy.Secret{variable, header("first-value-0123")}}}}
	sec := provision(t, b, spec)
	p = spec.Network
	p.Secrets = []netpolicy.Secret{header("rotated-value-0123")}
	if err := on(t, b, sec.ID).SetNetworkPolicy(ctx, p); err != nil {
		t.Fatalf("a header transform's new value: %v", err)
	}
	names := func() string {
		got, err := get(ctx, b, sec.ID)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, s := range got.Spec.Network.Secrets {
			n = append(n, s.Name+":"+s.Header)
		}
		return strings.Join(n, ",")
	}
	if got := names(); got != "TOKEN:,RULE_1:X-Token" {
		t.Errorf("Get after a rotation: secrets %s, want TOKEN:,RULE_1:X-Token", got)
	}
	p.Secrets = []netpolicy.Secret{header("short")}
	if err := on(t, b, sec.ID).SetNetworkPolicy(ctx, p); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a header transform of 5 bytes: %v, want ErrInvalidSpec", err)
	}
	p.Secrets = []netpolicy.Secret{variable}
	if err := on(t, b, sec.ID).SetNetworkPolicy(ctx, p); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a variable at run time: %v, want ErrUnsupported", err)
	}
	p.Secrets = nil
	if err := on(t, b, sec.ID).SetNetworkPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "TOKEN:" {
		t.Errorf("Get after the header transforms' removal: secrets %s, want TOKEN:", got)
	}
}
