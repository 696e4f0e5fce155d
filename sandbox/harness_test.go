package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// probeTarget is where the test probe is mounted inside sandboxes.
const probeTarget = sandboxtest.ProbeTarget

// probeDir holds the static testprobe binary (see sandboxtest.ProbeDir).
var probeDir = sandboxtest.ProbeDir

// withProbe returns spec with the probe mounted.
func withProbe(t *testing.T, spec sandbox.Spec) sandbox.Spec {
	t.Helper()
	dir, err := probeDir()
	if err != nil {
		t.Fatalf("building the test probe: %v", err)
	}
	spec.Mounts = append([]sandbox.Mount{{Source: dir, Target: probeTarget, Access: sandbox.ReadOnly}}, spec.Mounts...)
	return spec
}

// run runs argv in a sandbox built from spec and returns trimmed stdout.
func run(t *testing.T, spec sandbox.Spec, argv ...string) (string, *sandbox.Cmd, error) {
	t.Helper()
	cmd := sandbox.Command(context.Background(), spec, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("stderr of %v: %s", argv, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), cmd, err
}

// mustRun fails the test unless argv exits 0.
func mustRun(t *testing.T, spec sandbox.Spec, argv ...string) string {
	t.Helper()
	out, _, err := run(t, spec, argv...)
	if err != nil {
		t.Fatalf("%v: %v (stdout %q)", argv, err, out)
	}
	return out
}

// probe runs the test probe with args and returns its one-line verdict.
func probe(t *testing.T, spec sandbox.Spec, args ...string) string {
	t.Helper()
	return mustRun(t, withProbe(t, spec), append([]string{probeTarget + "/testprobe"}, args...)...)
}

// expect asserts a probe verdict.
func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func privileged() bool { return os.Geteuid() == 0 }

// rwDir returns a fresh host directory for an rw mount. A root caller's
// rw mount is written as the directory's owner, never as root (a
// root-owned one is refused), so as root the directory belongs to
// sandboxOwner; files the test puts in it must be chowned likewise (see
// ownBySandbox). rw mounts are idmapped as root, which some filesystems
// cannot do (tmpfs before Linux 6.3): tent then refuses, and the test
// skips with that reason.
func rwDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if privileged() {
		ownBySandbox(t, dir)
		skipWithoutIdmap(t, dir, sandbox.ReadWrite)
	}
	return dir
}

// skipWithoutIdmap skips the test when, as root, dir cannot be mounted
// with access because its filesystem cannot be idmapped (tmpfs before
// Linux 6.3: the VM's tmpfs run): tent refuses such a mount, which the
// other runs check.
func skipWithoutIdmap(t *testing.T, dir string, access sandbox.Access) {
	t.Helper()
	if !privileged() {
		return
	}
	_, _, err := run(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: "/probe-idmap", Access: access}}}}, "true")
	var ue *sandbox.UnsupportedError
	if errors.As(err, &ue) && strings.Contains(err.Error(), "cannot idmap") {
		t.Skipf("%s mounts as root need idmapped mounts, which %s does not support here: %v", access, dir, err)
	}
}

// sandboxOwner is the host uid (and gid) that owns root's rw test
// directories.
const sandboxOwner = 65534

// ownBySandbox chowns paths (not following symlinks) to sandboxOwner when
// the test runs as root; an unprivileged caller's files are its own.
func ownBySandbox(t *testing.T, paths ...string) {
	t.Helper()
	if !privileged() {
		return
	}
	for _, p := range paths {
		if err := os.Lchown(p, sandboxOwner, sandboxOwner); err != nil {
			t.Fatal(err)
		}
	}
}
