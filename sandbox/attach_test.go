package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// probeIn runs the test probe in sb and returns its verdict.
func probeIn(t *testing.T, sb *sandbox.Sandbox, args ...string) string {
	t.Helper()
	out, _ := execOut(t, sb, sandbox.ExecRequest{Args: append([]string{probeTarget + "/testprobe"}, args...)})
	return out
}

func TestAttachReadOnly(t *testing.T) {
	sb := provision(t, withProbe(t, sandbox.Spec{}))
	probeIn(t, sb, "sid") // the init now has a kept exec thread
	src := t.TempDir()
	os.Chmod(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/data/in"}); err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", "/data/in/hello"}}); out != "from the host" {
		t.Fatalf("cat: %q", out)
	}
	expect(t, "write into a ro attached mount", probeIn(t, sb, "open", "/data/in/new", "c"), "EROFS")
	expect(t, "write next to it, on the sandbox's root", probeIn(t, sb, "open", "/data/new", "c"), "EROFS")
	if _, err := os.Stat(filepath.Join(src, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file appeared on the host: %v", err)
	}
	if got := sb.Info().Spec.Mounts; len(got) != 2 || got[1].Target != "/data/in" {
		t.Errorf("spec mounts after attach: %+v", got)
	}
}

func TestAttachReadWriteReachesHostAndNextExecs(t *testing.T) {
	sb := provision(t, withProbe(t, sandbox.Spec{}))
	probeIn(t, sb, "sid")
	src := rwDir(t)
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/work", Access: sandbox.ReadWrite}); err != nil {
		t.Fatal(err)
	}
	// A new Landlock rule: the exec after Attach may write there.
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo written > /work/out"}}); res.ExitCode != 0 {
		t.Fatalf("writing to the attached rw mount: exit %d", res.ExitCode)
	}
	b, err := os.ReadFile(filepath.Join(src, "out"))
	if err != nil || string(b) != "written\n" {
		t.Fatalf("host sees %q, %v", b, err)
	}
	// And the rest of the sandbox is as read-only as before.
	expect(t, "write to /usr", probeIn(t, sb, "open", "/usr/tent-attach", "c"), "EROFS")
}

func TestAttachCopyOnWrite(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	src := t.TempDir() // a root caller's cow lower layer is idmapped from its owner, root included
	skipWithoutIdmap(t, src, sandbox.CopyOnWrite)
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755)
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("original\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/ws", Access: sandbox.CopyOnWrite}); err != nil {
		t.Fatal(err)
	}
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo changed > /ws/a && echo new > /ws/b"}}); res.ExitCode != 0 {
		t.Fatalf("writing to the cow mount: exit %d", res.ExitCode)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "a")); string(b) != "original\n" {
		t.Fatalf("the host directory changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(src, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file appeared on the host: %v", err)
	}
	layers := sb.Info().Layers
	if len(layers) != 1 || layers[0].Target != "/ws" {
		t.Fatalf("cow layers: %+v", layers)
	}
	if b, err := os.ReadFile(filepath.Join(layers[0].Upper, "b")); err != nil || string(b) != "new\n" {
		t.Fatalf("upper layer b: %q, %v", b, err)
	}
	upperRoot := filepath.Dir(filepath.Dir(layers[0].Upper))
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(upperRoot); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("terminate left the layers: %v", err)
	}
}

func TestAttachRefusesBadMounts(t *testing.T) {
	ro := t.TempDir()
	os.Chmod(ro, 0o755)
	sb := provision(t, withProbe(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: ro, Target: "/ro"}}}}))
	src := t.TempDir()
	os.Chmod(src, 0o755)
	for _, tc := range []struct {
		name string
		m    sandbox.Mount
	}{
		{"a system path", sandbox.Mount{Source: src, Target: "/usr"}},
		{"an existing user mount", sandbox.Mount{Source: src, Target: "/ro"}},
		{"/proc", sandbox.Mount{Source: src, Target: "/proc/x"}},
		{"a relative target", sandbox.Mount{Source: src, Target: "rel"}},
		{"a missing source", sandbox.Mount{Source: filepath.Join(src, "nope"), Target: "/x"}},
		{"dot-dot", sandbox.Mount{Source: src, Target: "/a/../b"}},
		{"a bad access", sandbox.Mount{Source: src, Target: "/x", Access: "rx"}},
		{"a mount point missing beneath a ro mount", sandbox.Mount{Source: src, Target: "/ro/sub"}},
	} {
		err := sb.Mount(context.Background(), tc.m)
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", tc.name, err)
		}
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 0 {
		t.Errorf("the ro mount's host directory got %d entries", len(entries))
	}
	// A symlink planted by the sandbox is never followed.
	if _, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"ln", "-s", "/etc", "/tmp/link"}}); res.ExitCode != 0 {
		t.Fatal("ln failed")
	}
	err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/tmp/link/x"})
	if err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Errorf("attach through a symlink: %v, want ELOOP", err)
	}
	expect(t, "/etc/x", probeIn(t, sb, "open", "/etc/x", "r"), "ENOENT")
	if got := sb.Info().Spec.Mounts; len(got) != 2 {
		t.Errorf("refused attaches changed the spec: %+v", got)
	}
	// Suspended and terminated sandboxes refuse.
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/late"}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Errorf("attach after terminate: %v", err)
	}
}

// A snapshot taken after an attach records the mount, and a fork gets it.
func TestAttachIsInSnapshots(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	src := t.TempDir()
	os.Chmod(src, 0o755)
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	if err := sb.Mount(context.Background(), sandbox.Mount{Source: src, Target: "/att"}); err != nil {
		t.Fatal(err)
	}
	snap, err := sb.Snapshot(context.Background(), t.TempDir(), sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Spec.Mounts) != 1 || snap.Spec.Mounts[0].Target != "/att" {
		t.Fatalf("snapshot spec mounts: %+v", snap.Spec.Mounts)
	}
	var out bytes.Buffer
	if err := sb.ReadFile(context.Background(), "/att/f", &out, sandbox.ReadOptions{}); err != nil || out.String() != "x" {
		t.Fatalf("ReadFile through the attached mount: %q, %v", out.String(), err)
	}
}

// A mount point missing beneath another mount (here the sandbox's /tmp)
// is created with the sandbox's own rights, a file for a file source.
func TestAttachCreatesMountPointBeneathAMount(t *testing.T) {
	sb := provision(t, sandbox.Spec{})
	src := t.TempDir()
	os.Chmod(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("one file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sb.Mount(ctx, sandbox.Mount{Source: src, Target: "/tmp/deep/dir"}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mount(ctx, sandbox.Mount{Source: filepath.Join(src, "f"), Target: "/tmp/other/f"}); err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /tmp/deep/dir/f /tmp/other/f"}}); out != "one file\none file" {
		t.Fatalf("the mounts read %q", out)
	}
}
