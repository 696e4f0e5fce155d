package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// backendOut runs argv in sandbox id of b and returns trimmed stdout.
func backendOut(t *testing.T, b sandbox.Backend, id string, argv ...string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := handle(t, b, id).Exec(context.Background(), sandbox.ExecRequest{Args: argv, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v: %+v, %v", argv, res, err)
	}
	return strings.TrimSpace(out.String())
}

// The helpers the manager and supervised tests share.
var (
	newLocal   = sandboxtest.NewLocal
	assertGone = sandboxtest.AssertGone
	pidAlive   = sandboxtest.PIDAlive
	eventually = sandboxtest.Eventually
	infoOf     = sandboxtest.Info
	handle     = sandboxtest.Handle
)

func TestLocalBackendCapabilities(t *testing.T) {
	l := newLocal(t, sandbox.LocalOptions{})
	c := l.Capabilities()
	if l.Name() != "local" || !c.Snapshot || !c.Resume || !c.NetworkPolicy {
		t.Errorf("%s: %+v", l.Name(), c)
	}
	switch c.CgroupVersion {
	case "v1", "v2":
		if !c.Suspend && c.CgroupVersion == "v2" {
			t.Errorf("cgroup v2 without suspend: %+v", c)
		}
	case "none":
		if c.Suspend {
			t.Errorf("suspend without a cgroup: %+v", c)
		}
	default:
		t.Errorf("cgroup version %q", c.CgroupVersion)
	}
	// What provisioning reports agrees with what was probed.
	s, err := l.Provision(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if (len(s.CgroupPaths) > 0) != (c.CgroupVersion != "none") {
		t.Errorf("capabilities say cgroup %s, the sandbox has cgroups %v", c.CgroupVersion, s.CgroupPaths)
	}
	if canLimit(t) != (c.CgroupVersion != "none") {
		t.Errorf("capabilities say cgroup %s, limits work: %v", c.CgroupVersion, canLimit(t))
	}
	for _, p := range s.Protections {
		if p.Name == "landlock" && (p.Status == sandbox.Absent) != (c.LandlockABI == 0) {
			t.Errorf("landlock protection %+v, capability ABI %d", p, c.LandlockABI)
		}
	}
	if _, err := sandbox.NewLocal(sandbox.LocalOptions{SnapshotDir: "relative"}); !errors.Is(err, sandbox.ErrInvalidOptions) || !strings.Contains(err.Error(), "LocalOptions.SnapshotDir") {
		t.Errorf("relative snapshot dir: %v", err)
	}
}

// What the conformance suite (TestLocalBackendConformance) cannot see:
// Local's ids, its init a child of this process, and nothing of it left
// after Terminate.
func TestLocalBackendLifecycle(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, sandbox.LocalOptions{})
	s, err := l.Provision(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != sandbox.StateRunning || len(s.ID) != 16 || s.Backend != "local" || !pidAlive(s.InitPID) {
		t.Fatalf("provisioned %+v", s)
	}
	if got, err := infoOf(ctx, l, s.ID[:3]); err != nil || got.ID != s.ID || got.InitPID != s.InitPID {
		t.Errorf("get by prefix: %+v, %v", got, err)
	}
	if _, err := infoOf(ctx, l, ""); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("get \"\": %v, want ErrNotFound", err)
	}
	if err := handle(t, l, s.ID[:6]).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, s)
}

// TestLocalBackendSnapshotForkResume: a snapshot feeds Fork (with
// overrides) and, once the sandbox has ended, Resume under the same id.
func TestLocalBackendSnapshotForkResume(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, sandbox.LocalOptions{})
	s, err := l.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Hostname: "origin"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fork(ctx, "any", sandbox.ForkOverrides{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("fork before any snapshot: %v", err)
	}
	backendOut(t, l, s.ID, "sh", "-c", "echo saved > /tmp/state")
	snap, err := handle(t, l, s.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.SandboxID != s.ID || !strings.HasPrefix(snap.Dir, os.TempDir()) {
		t.Errorf("snapshot %+v", snap)
	}
	backendOut(t, l, s.ID, "sh", "-c", "echo later > /tmp/state")

	limits := sandbox.Limits{Timeout: time.Minute}
	fork, err := l.Fork(ctx, snap.ID[:6], sandbox.ForkOverrides{Hostname: "forked", Env: []string{"FORKED=yes"}, Limits: &limits})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ID == s.ID || fork.Spec.Limits.Timeout != time.Minute || fork.Spec.Hostname != "forked" {
		t.Errorf("fork %+v", fork)
	}
	if out := backendOut(t, l, fork.ID, "sh", "-c", "cat /tmp/state; hostname; echo $FORKED"); out != "saved\nforked\nyes" {
		t.Errorf("the fork sees %q", out)
	}

	// The original's init dies (as after an OOM kill): it reads stopped,
	// and Resume brings it back from its snapshot, under the same id,
	// with a new init, after cleaning up the old one.
	if err := syscall.Kill(s.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sandbox to read stopped", func() bool {
		got, err := infoOf(ctx, l, s.ID)
		return err == nil && got.State == sandbox.StateStopped
	})
	back, err := handle(t, l, s.ID).Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != s.ID || back.State != sandbox.StateRunning || back.InitPID == s.InitPID {
		t.Errorf("resumed %+v (was init %d)", back, s.InitPID)
	}
	assertGone(t, s)
	if out := backendOut(t, l, s.ID, "sh", "-c", "cat /tmp/state; hostname"); out != "saved\norigin" {
		t.Errorf("resumed sandbox sees %q", out)
	}

	// The fork has no snapshot of its own: once ended, it cannot resume.
	other, err := l.Provision(ctx, sandbox.Spec{Limits: sandbox.Limits{Timeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second sandbox's timeout", func() bool {
		got, err := infoOf(ctx, l, other.ID)
		return err == nil && got.State == sandbox.StateStopped
	})
	if _, err := handle(t, l, other.ID).Resume(ctx); !errors.Is(err, sandbox.ErrTerminated) || !strings.Contains(err.Error(), "no snapshot") {
		t.Errorf("resume without a snapshot: %v", err)
	}

	// Close removes the per-Local snapshot directory and every sandbox.
	list, _ := l.List(ctx)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		assertGone(t, s)
	}
	if _, err := os.Stat(filepath.Dir(snap.Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot directory left behind: %v", err)
	}
}

func TestLocalBackendSnapshotDirOutlivesIt(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "snapshots")
	l := newLocal(t, sandbox.LocalOptions{SnapshotDir: dir})
	s, err := l.Provision(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := handle(t, l, s.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(snap.Dir) != dir {
		t.Errorf("snapshot in %s, want under %s", snap.Dir, dir)
	}
	if err := l.Health(ctx); err != nil {
		t.Errorf("health: %v", err)
	}
	l.Close(ctx)
	if got, err := sandbox.FindSnapshot(dir, snap.ID); err != nil || got.SandboxID != s.ID {
		t.Errorf("the store after Close: %+v, %v", got, err)
	}
	for name, err := range map[string]error{
		"Provision": func() error { _, err := l.Provision(ctx, sandbox.Spec{}); return err }(),
		"List":      func() error { _, err := l.List(ctx); return err }(),
		"Health":    l.Health(ctx),
	} {
		if !errors.Is(err, sandbox.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestLocalBackendCloseLeavesNothing(t *testing.T) {
	ctx := context.Background()
	l0 := newLocal(t, sandbox.LocalOptions{}) // warm up lazily created state
	if s, err := l0.Provision(ctx, sandbox.Spec{}); err == nil {
		_ = handle(t, l0, s.ID).Terminate(ctx)
	}
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sessions []sandbox.Info
	for i := 0; i < 2; i++ {
		s, err := l.Provision(ctx, sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	go func() {
		_, _ = handle(t, l, sessions[0].ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sleep", "331"}})
	}()
	time.Sleep(200 * time.Millisecond)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		assertGone(t, s)
	}
	assertNoProcess(t, "sleep", "331")
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
	if n := openFDs(t); n != fds {
		t.Errorf("descriptors: %d before, %d after", fds, n)
	}
	if err := l.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// protectionOf returns r's entry for the protection named name.
func protectionOf(r *sandbox.Report, name string) (sandbox.Protection, bool) {
	for _, p := range r.Protections {
		if p.Name == name {
			return p, true
		}
	}
	return sandbox.Protection{}, false
}
