package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// sandboxWritableDir returns a host directory that a sandbox may be given
// rw: as root, owned by an unprivileged uid (a root caller's rw mount of a
// root-owned directory is refused).
func sandboxWritableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if privileged() {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		skipWithoutIdmap(t, dir, sandbox.ReadWrite)
	}
	return dir
}

// The attack: the sandbox owns /shared (an rw mount) and replaces
// /shared/data, which the caller then attaches by its host path, with a
// symlink to a directory it must never see. The attach must refuse the
// path (ELOOP), for every access, and nothing of the victim appear.
func TestAttachNeverFollowsASymlinkedSource(t *testing.T) {
	shared := sandboxWritableDir(t)
	victim := t.TempDir() // root-only as root; outside every mount either way
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(shared, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if privileged() {
		if err := os.Chown(filepath.Join(shared, "data"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	sb := provision(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: shared, Target: "/shared", Access: sandbox.ReadWrite}}}})
	if out, res := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "rm -rf /shared/data && ln -s " + victim + " /shared/data && echo planted"}}); out != "planted" || res.ExitCode != 0 {
		t.Fatalf("planting the symlink: %q, exit %d", out, res.ExitCode)
	}
	for _, access := range []sandbox.Access{sandbox.ReadOnly, sandbox.ReadWrite, sandbox.CopyOnWrite} {
		target := "/data-" + string(access)
		err := sb.Mount(context.Background(), sandbox.Mount{Source: filepath.Join(shared, "data"), Target: target, Access: access})
		if !errors.Is(err, unix.ELOOP) || !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "realpath") {
			t.Errorf("attach --%s of a symlinked source: %v, want ErrInvalidSpec wrapping ELOOP", access, err)
		}
		out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat " + target + "/secret 2>&1 || true"}})
		if strings.Contains(out, "SECRET") {
			t.Fatalf("the victim's file is readable at %s", target)
		}
	}
	// Provisioning refuses the same source the same way.
	_, err := sandbox.Provision(context.Background(), sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: filepath.Join(shared, "data"), Target: "/data", Access: sandbox.ReadOnly}}}}, sandbox.ProvisionOptions{})
	if !errors.Is(err, unix.ELOOP) || !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("provisioning with a symlinked source: %v, want ErrInvalidSpec wrapping ELOOP", err)
	}
}
