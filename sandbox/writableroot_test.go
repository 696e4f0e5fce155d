//go:build linux

package sandbox_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// Spec.WritableRoot: new files and directories at / live in the
// sandbox's root tmpfs; the host's system directories, /dev and
// read-only mounts stay read-only (EROFS). Without it, / is read-only.
func TestWritableRoot(t *testing.T) {
	ro := t.TempDir()
	os.Chmod(ro, 0o755)
	spec := withProbe(t, sandbox.Spec{Filesystem: sandbox.Filesystem{WritableRoot: true, Mounts: []sandbox.Mount{{Source: ro, Target: "/data", Access: sandbox.ReadOnly}}}})
	sb := provision(t, spec)
	expect(t, "mkdir /0", probeIn(t, sb, "mkdir", "/0"), "ok")
	expect(t, "create /0/f", probeIn(t, sb, "open", "/0/f", "c"), "ok")
	expect(t, "create /f", probeIn(t, sb, "open", "/f", "c"), "ok")
	for _, p := range []string{"/usr/x", "/etc/x", "/dev/x", "/data/x"} {
		expect(t, "create "+p, probeIn(t, sb, "open", p, "c"), "EROFS")
	}
	expect(t, "mkdir /usr/d", probeIn(t, sb, "mkdir", "/usr/d"), "EROFS")
	// Landlock now lets commands write beneath /proc too: the kernel's
	// permissions decide (and /proc/sys stays a read-only mount).
	expect(t, "write /proc/sys/kernel/hostname", probeIn(t, sb, "open", "/proc/sys/kernel/hostname", "w"), "EACCES")
	if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo hi > /0/a && cat /0/a && ls /usr/bin/sh"}}); res.ExitCode != 0 || out != "hi\n/usr/bin/sh" {
		t.Errorf("writing /0/a: exit %d, %q", res.ExitCode, out)
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Errorf("the read-only mount's host directory changed: %v", ents)
	}

	// The default: / is read-only.
	plain := provision(t, withProbe(t, sandbox.Spec{}))
	expect(t, "mkdir /0 without WritableRoot", probeIn(t, plain, "mkdir", "/0"), "EROFS")

	// Spec.Root decides its own writability.
	_, err := sandbox.Provision(context.Background(), sandbox.Spec{Filesystem: sandbox.Filesystem{WritableRoot: true, Root: &sandbox.Root{Path: t.TempDir()}}}, sandbox.ProvisionOptions{})
	if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "writable_root") {
		t.Errorf("WritableRoot with Root: %v, want ErrInvalidSpec naming writable_root", err)
	}
}

// What a sandbox writes at / is in its snapshots and forks, each fork's
// own; what it plants there (a symlink to a host path, a FIFO, a
// symlink loop) is archived as what it is and never followed or read by
// the host; the plan's own mount points and symlinks are not archived.
func TestWritableRootSnapshotAndFork(t *testing.T) {
	ctx := context.Background()
	sb := provision(t, withProbe(t, sandbox.Spec{Filesystem: sandbox.Filesystem{WritableRoot: true}}))
	execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", `mkdir -p /0 /a/b && echo zero > /0/f && echo deep > /a/b/g &&
		ln -s /etc/shadow /evil && ln -s / /loop && mkfifo /fifo && echo home > $HOME/h`}})

	store := t.TempDir()
	snap, err := sb.Snapshot(ctx, store, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var root *sandbox.SnapshotPart
	for i, p := range snap.Parts {
		if p.Kind == "root" {
			root = &snap.Parts[i]
		}
	}
	if root == nil || root.Target != "/" {
		t.Fatalf("no root part in %+v", snap.Parts)
	}
	names := partNames(t, filepath.Join(snap.Dir, root.File))
	for _, want := range []string{"0/", "0/f", "a/b/g", "evil", "loop", "opt/"} {
		if !names[want] {
			t.Errorf("root part lacks %q: %v", want, names)
		}
	}
	// Mount points (the system directories, /proc, /tmp, $HOME, the
	// probe's mount), the plan's symlinks and the FIFO are not in it.
	for _, not := range []string{"usr/", "proc/", "tmp/", "dev/", "opt/probe/", "fifo", "etc/", "usr/bin/sh"} {
		if names[not] {
			t.Errorf("root part holds %q: %v", not, names)
		}
	}
	execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo later > /0/f"}})

	fork := forkFrom(t, snap.Dir)
	out, res := execOut(t, fork, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /0/f /a/b/g $HOME/h; readlink /evil; readlink /loop; test -e /fifo || echo nofifo; ls /usr/bin/sh"}})
	if res.ExitCode != 0 || out != "zero\ndeep\nhome\n/etc/shadow\n/\nnofifo\n/usr/bin/sh" {
		ls, _ := execOut(t, fork, sandbox.ExecRequest{Args: []string{"sh", "-c", "ls -la / 2>&1"}})
		t.Errorf("the fork sees %q (exit %d, stderr %q); its root:\n%s", out, res.ExitCode, res.Stderr, ls)
	}
	expect(t, "the fork's /usr", probeIn(t, fork, "open", "/usr/x", "c"), "EROFS")
	// Each its own.
	execOut(t, fork, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo fork > /0/f"}})
	if out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"cat", "/0/f"}}); out != "later" {
		t.Errorf("the original sees %q after the fork wrote", out)
	}
}

// partNames lists the entries of a snapshot part (zstd tar).
func partNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sandbox.TarEntries(t, file, func(h *tar.Header, _ []byte) { names[h.Name] = true })
	return names
}
