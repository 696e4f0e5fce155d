package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestSnapshotAndFork(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir() // cow: never written, idmapped from its owner (root included)
	skipWithoutIdmap(t, src, sandbox.CopyOnWrite)
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755)
	os.WriteFile(filepath.Join(src, "base.txt"), []byte("base\n"), 0o666)
	os.Chmod(filepath.Join(src, "base.txt"), 0o666)
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/work", Access: sandbox.CopyOnWrite}}}, Identity: sandbox.Identity{Hostname: "origin"}}
	sb := provision(t, spec)
	execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo tmp > /tmp/t; echo home > $HOME/h; echo cow > /work/c; rm /work/base.txt"}})

	store := t.TempDir()
	snap, err := sb.Snapshot(ctx, store, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Changes after the snapshot are not in it.
	execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo later > /tmp/t; echo later > /work/c"}})

	fork := forkFrom(t, snap.Dir)
	out, _ := execOut(t, fork, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /tmp/t $HOME/h /work/c; ls /work; hostname"}})
	if out != "tmp\nhome\ncow\nc\norigin" {
		t.Errorf("the fork sees %q", out)
	}
	// The two are independent.
	execOut(t, fork, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo fork > /tmp/t"}})
	if out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", "/tmp/t"}}); out != "later" {
		t.Errorf("the original sees %q after the fork wrote", out)
	}
	if ents, _ := os.ReadDir(src); len(ents) != 1 {
		t.Errorf("the host directory changed: %v", ents)
	}

	// A damaged part is detected before anything is restored.
	part := filepath.Join(snap.Dir, snap.Parts[0].File)
	b, _ := os.ReadFile(part)
	b[len(b)/2] ^= 0xff
	os.WriteFile(part, b, 0o600)
	if _, err := sandbox.LoadSnapshot(snap.Dir); !errors.Is(err, sandbox.ErrSnapshotCorrupt) {
		t.Errorf("corrupt snapshot: %v, want ErrSnapshotCorrupt", err)
	}
	if ents, _ := os.ReadDir(store); len(ents) != 1 || strings.HasPrefix(ents[0].Name(), ".tmp") {
		t.Errorf("snapshot store: %v", ents)
	}
}

func TestSnapshotRemovesItsSandboxsUnfinishedSnapshots(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	store := t.TempDir()
	// What an owner killed while snapshotting leaves: a partial snapshot
	// in a dot directory named after the sandbox.
	for _, d := range []string{".tmp-box-0123", ".tmp-box-4567/sub", ".tmp-other-89ab"} {
		if err := os.MkdirAll(filepath.Join(store, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := sb.Snapshot(context.Background(), store, sandbox.SnapshotOptions{ID: "cdef", SandboxID: "box"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(store)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// The next snapshot of the same sandbox removed its leftovers, not
	// another sandbox's.
	if strings.Join(names, " ") != ".tmp-other-89ab cdef" || snap.Dir != filepath.Join(store, "cdef") {
		t.Errorf("snapshot store after the next snapshot: %v (snapshot in %s)", names, snap.Dir)
	}
}

// rw mounts are archived only when asked, and a fork restores them only
// into an empty host directory, never over live files.
func TestSnapshotIncludesReadWriteOnRequest(t *testing.T) {
	ctx := context.Background()
	src := rwDir(t)
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/rw", Access: sandbox.ReadWrite}}}}
	sb := provision(t, spec)
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo one > /rw/a && mkdir /rw/d && echo two > /rw/d/b"}}); res.ExitCode != 0 {
		t.Fatalf("writing to the rw mount: exit %d", res.ExitCode)
	}
	store := t.TempDir()
	plain, err := sb.Snapshot(ctx, store, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plain.Parts {
		if p.Kind == "rw" {
			t.Fatalf("a default snapshot archived the rw mount: %+v", p)
		}
	}
	snap, err := sb.Snapshot(ctx, store, sandbox.SnapshotOptions{IncludeReadWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	var rw []sandbox.SnapshotPart
	for _, p := range snap.Parts {
		if p.Kind == "rw" {
			rw = append(rw, p)
		}
	}
	if len(rw) != 1 || rw[0].Target != "/rw" {
		t.Fatalf("rw parts: %+v", rw)
	}
	if err := sb.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	loaded, err := sandbox.LoadSnapshot(snap.Dir)
	if err != nil {
		t.Fatal(err)
	}
	// The host directory still has contents (changed since): left alone.
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("host's\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	fork, err := sandbox.Fork(ctx, loaded, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fork.Terminate(ctx)
	if b, _ := os.ReadFile(filepath.Join(src, "a")); string(b) != "host's\n" {
		t.Fatalf("a fork overwrote live host files: a = %q", b)
	}
	// Emptied (lost): restored.
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(src, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	fork, err = sandbox.Fork(ctx, loaded, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Terminate(ctx)
	a, _ := os.ReadFile(filepath.Join(src, "a"))
	b, _ := os.ReadFile(filepath.Join(src, "d", "b"))
	if string(a) != "one\n" || string(b) != "two\n" {
		t.Fatalf("restored into the empty directory: a=%q d/b=%q", a, b)
	}
}

// forkFrom loads the snapshot in dir (its checksums verified) and forks
// it; the fork is terminated when the test ends.
func forkFrom(t *testing.T, dir string) *sandbox.Sandbox {
	t.Helper()
	loaded, err := sandbox.LoadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := sandbox.Fork(context.Background(), loaded, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fork.Terminate(context.Background()) })
	return fork
}
