//go:build linux

package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestFileOverSystemFile: a file mounted over a file of a read-only
// system directory (/etc/hosts, /etc/resolv.conf) is what the sandbox
// sees, as with docker -v, read-only, and the host's file is untouched; a
// file over a directory or over a symlink is refused, saying why.
func TestFileOverSystemFile(t *testing.T) {
	dir := t.TempDir()
	hosts, resolv := filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(hosts, []byte("10.1.2.3 myhost.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // an unprivileged sandbox of root's must read it
	before, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: hosts, Target: "/etc/hosts", Access: sandbox.ReadOnly},
				{Source: resolv, Target: "/etc/resolv.conf", Access: sandbox.ReadOnly},
			},
		},
	}
	out := mustRun(t, spec, "sh", "-c", `cat /etc/resolv.conf /etc/hosts; echo x 2>&1 > /etc/hosts || echo "write refused"`)
	for _, want := range []string{"nameserver 127.0.0.77", "10.1.2.3 myhost.example", "write refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if after, _ := os.ReadFile("/etc/hosts"); string(after) != string(before) {
		t.Error("the host's /etc/hosts changed")
	}

	for _, tc := range []struct{ target, want string }{
		{"/etc/ssl", "is a directory"},
		{"/etc/mtab", "is a symlink"}, // Debian: -> /proc/mounts (or ../proc/self/mounts)
	} {
		if fi, err := os.Lstat(tc.target); err != nil || (tc.want == "is a symlink") != (fi.Mode()&os.ModeSymlink != 0) {
			t.Logf("skipping %s: not what this host has", tc.target)
			continue
		}
		spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: hosts, Target: tc.target, Access: sandbox.ReadOnly}}}}
		_, _, err := run(t, spec, "true")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a file over %s: %v, want an error saying it %s", tc.target, err, tc.want)
		}
	}
}
