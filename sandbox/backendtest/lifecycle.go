package backendtest

// The lifecycle cases: snapshots and forks, suspend, stop and resume,
// terminate, a cancelled context, dial.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// A snapshot carries /tmp into a fork, with the fork's overrides; the
// fork is independent of its origin.
func snapshotFork(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{Identity: sandbox.Identity{Hostname: "origin"}})
	if _, err := b.Fork(ctx, "ffffffffffff", sandbox.ForkOverrides{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("fork of an unknown snapshot: %v, want ErrNotFound", err)
	}
	out(t, b, s.ID, "sh", "-c", "echo saved > /tmp/state")
	snap, err := on(t, b, s.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.SandboxID != s.ID {
		t.Errorf("snapshot of %s says %s", s.ID, snap.SandboxID)
	}
	out(t, b, s.ID, "sh", "-c", "echo later > /tmp/state")
	fork, err := b.Fork(ctx, snap.ID, sandbox.ForkOverrides{Hostname: "forked", Env: []string{"FORKED=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ID == s.ID || fork.Spec.Hostname != "forked" {
		t.Errorf("fork %+v", fork)
	}
	if got := out(t, b, fork.ID, "sh", "-c", "cat /tmp/state; hostname; echo $FORKED"); got != "saved\nforked\nyes" {
		t.Errorf("the fork sees %q", got)
	}
	out(t, b, fork.ID, "sh", "-c", "echo fork > /tmp/state")
	if got := out(t, b, s.ID, "cat", "/tmp/state"); got != "later" {
		t.Errorf("the origin sees %q after the fork wrote", got)
	}
}

// Suspend freezes and Resume thaws, where the backend can; elsewhere
// Suspend is ErrUnsupported.
func suspendResume(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	if !b.Capabilities().Suspend {
		if err := on(t, b, s.ID).Suspend(ctx); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("suspend without a freezer: %v, want ErrUnsupported", err)
		}
		return
	}
	if err := on(t, b, s.ID).Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := get(ctx, b, s.ID); err != nil || got.State != sandbox.StateSuspended {
		t.Errorf("state %s, %v; want suspended", got.State, err)
	}
	if _, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrSuspended) {
		t.Errorf("exec while suspended: %v, want ErrSuspended", err)
	}
	if got, err := on(t, b, s.ID).Resume(ctx); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("Resume: %+v, %v", got, err)
	}
	if got := out(t, b, s.ID, "echo", "thawed"); got != "thawed" {
		t.Errorf("after Resume: %q", got)
	}
}

// Stop ends every process and keeps the sandbox, stopped; Resume brings
// it back under the same id from its latest snapshot: its files are
// there, its processes are not.
func stopResume(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	procs := func() string {
		return out(t, b, s.ID, "sh", "-c", "for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | grep -c '^sleep$' || true")
	}
	out(t, b, s.ID, "sh", "-c", "echo kept > /tmp/kept; sleep 1000 >/dev/null 2>&1 &")
	if got := procs(); got != "1" {
		t.Fatalf("%s sleep processes before Stop, want 1", got)
	}
	if !b.Capabilities().Resume {
		t.Skip("the backend cannot resume a stopped sandbox")
	}
	if _, err := on(t, b, s.ID).Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := on(t, b, s.ID).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := get(ctx, b, s.ID); err != nil || got.State != sandbox.StateStopped {
		t.Fatalf("after Stop: state %q, %v; want stopped", got.State, err)
	}
	if _, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrStopped) && !errors.Is(err, sandbox.ErrTerminated) {
		t.Errorf("exec in a stopped sandbox: %v, want ErrStopped or ErrTerminated", err)
	}
	if err := on(t, b, s.ID).Stop(ctx); err != nil {
		t.Errorf("Stop of a stopped sandbox: %v, want nil", err)
	}
	got, err := on(t, b, s.ID).Resume(ctx)
	if err != nil || got.ID != s.ID || got.State != sandbox.StateRunning {
		t.Fatalf("Resume: %+v, %v; want %s running", got, err, s.ID)
	}
	if got := out(t, b, s.ID, "cat", "/tmp/kept"); got != "kept" {
		t.Errorf("after Resume /tmp/kept holds %q", got)
	}
	if got := procs(); got != "0" {
		t.Errorf("%s sleep processes after Stop and Resume, want 0", got)
	}
}

// Terminate ends the sandbox; the backend forgets it, and a handle
// opened before fails every verb with ErrNotFound.
func terminate(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	keep := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID[:8])
	if h.ID() != s.ID {
		t.Errorf("a handle opened by prefix has id %q, want %q", h.ID(), s.ID)
	}
	if err := h.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Open":      func() error { _, err := b.Open(ctx, s.ID); return err }(),
		"Info":      func() error { _, err := h.Info(ctx); return err }(),
		"Exec":      func() error { _, err := h.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); return err }(),
		"Usage":     func() error { _, err := h.Usage(ctx); return err }(),
		"Terminate": h.Terminate(ctx),
	} {
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s after Terminate: %v, want ErrNotFound", name, err)
		}
	}
	if list, err := b.List(ctx); err != nil || len(list) != 1 || list[0].ID != keep.ID {
		t.Errorf("List after Terminate: %+v, %v; want only the other sandbox", list, err)
	}
}

// A call whose context has already ended returns its error and changes
// nothing.
func cancelled(t *testing.T, b sandbox.Backend) {
	s := provision(t, b, sandbox.Spec{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Provision(ctx, sandbox.Spec{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Provision: %v, want context.Canceled", err)
	}
	h := on(t, b, s.ID)
	if err := h.Mount(ctx, sandbox.Mount{Source: t.TempDir(), Target: "/m"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Mount: %v, want context.Canceled", err)
	}
	if _, err := h.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec: %v, want context.Canceled", err)
	}
	if list, err := b.List(context.Background()); err != nil || len(list) != 1 {
		t.Errorf("List: %+v, %v; want the one sandbox", list, err)
	}
}

// Dial reaches a server on the sandbox's loopback from the host; a port
// nothing listens on is ECONNREFUSED, a port outside 1-65535
// ErrInvalidSpec, and a terminated sandbox ErrNotFound.
func dial(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		t.Fatal(err)
	}
	info := provision(t, b, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: probe, Target: sandboxtest.ProbeTarget}}}})
	if _, err := on(t, b, info.ID).Dial(ctx, 8000); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Dial with nothing listening: %v, want ECONNREFUSED", err)
	}
	if _, err := on(t, b, info.ID).Dial(ctx, 70000); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Dial of port 70000: %v, want ErrInvalidSpec", err)
	}
	out(t, b, info.ID, "sh", "-c", "setsid "+sandboxtest.ProbeTarget+"/testprobe httpserve 127.0.0.1:8000 </dev/null >/dev/null 2>&1 &")
	var c net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = on(t, b, info.ID).Dial(ctx, 8000); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Dial once the server listens: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.0\r\nHost: from-the-host\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.0 200") || !strings.Contains(string(resp), "GET /x\nHost: from-the-host\n") {
		t.Errorf("the server's answer: %q, %v", resp, err)
	}
	h := on(t, b, info.ID)
	if err := h.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Dial(ctx, 8000); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Dial after Terminate: %v, want ErrNotFound", err)
	}
}
