package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// busyboxRoot makes a minimal root filesystem: a static busybox and the
// directories an image has. It skips without a static busybox.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox (Debian's busybox-static)")
	}
	if out, _ := exec.Command("file", "-L", bb).Output(); len(out) > 0 && !strings.Contains(string(out), "static") {
		t.Skipf("%s is not statically linked", bb)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sh", "cat", "echo", "ls", "touch"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A directory as the root: the command sees that tree, not the host's;
// a read-only root refuses writes with EROFS, a writable one reaches the
// directory.
func TestRootDirectory(t *testing.T) {
	root := busyboxRoot(t)
	ctx := context.Background()
	for _, ro := range []bool{true, false} {
		sb, err := sandbox.Provision(ctx, sandbox.Spec{Filesystem: sandbox.Filesystem{Root: &sandbox.Root{Path: root, ReadOnly: ro}}, Identity: sandbox.Identity{Env: []string{"PATH=/bin"}}}, sandbox.ProvisionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "ls /; cat /etc/hostname 2>&1; test -e /usr && echo usr; touch /made 2>&1; echo rc=$?"}})
		if err != nil {
			t.Fatal(err)
		}
		// A root caller's root on a filesystem that cannot be idmapped
		// (tmpfs before Linux 6.3) is bound as it is: the sandbox's
		// unprivileged host id cannot write root's directory.
		plain := false
		for _, p := range sb.Info().Protections {
			plain = plain || p.Name == "root idmapping"
		}
		_ = sb.Terminate(ctx)
		out := string(res.Stdout)
		if strings.Contains(out, "usr") && !strings.Contains(out, "No such file") {
			t.Errorf("ro=%v: the host's /usr is visible:\n%s", ro, out)
		}
		_, statErr := os.Stat(filepath.Join(root, "made"))
		if ro {
			if !strings.Contains(out, "Read-only file system") || !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("ro root: want EROFS and no file, got %q (stat: %v)", out, statErr)
			}
		} else if plain {
			if !strings.Contains(out, "Permission denied") || !errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("rw root bound without idmapping: want EACCES for root's directory, got %q (stat: %v)", out, statErr)
			}
		} else if !strings.Contains(out, "rc=0") || statErr != nil {
			t.Errorf("rw root: touch /made: %q (stat: %v)", out, statErr)
		}
	}
}

// A root the reduced tier cannot give, a relative path or a file are
// refused before anything starts.
func TestRootRefused(t *testing.T) {
	ctx := context.Background()
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*sandbox.Root{{Path: "rel/root"}, {Path: f}, {Path: "/"}, {Path: "/nonexistent-root"}} {
		_, err := sandbox.Provision(ctx, sandbox.Spec{Filesystem: sandbox.Filesystem{Root: r}}, sandbox.ProvisionOptions{})
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("root %q: want ErrInvalidSpec, got %v", r.Path, err)
		}
	}
}
