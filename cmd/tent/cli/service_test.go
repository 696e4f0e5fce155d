package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tent create --policy with a service answers once the service is ready,
// and tent ps lists it, tagged service; one never ready fails the create
// naming the check, with the service's output, and leaves no sandbox.
func TestCLIPolicyService(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready.yaml")
	if err := os.WriteFile(ready, []byte("service:\n  start: \"echo hi; touch /tmp/up; exec sleep 600\"\n  ready_command: \"test -e /tmp/up\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := l.create(t, "--policy", ready)
	ps := l.tent(t, "ps", id)
	ps.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(ps.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "TAG") || strings.Fields(lines[1])[1] != "running" ||
		!strings.Contains(lines[1], " service ") || !strings.Contains(lines[1], "sleep 600") {
		t.Errorf("tent ps:\n%s", ps.stdout)
	}

	never := filepath.Join(dir, "never.yaml")
	if err := os.WriteFile(never, []byte("service:\n  start: \"echo still-booting; exec sleep 600\"\n  ready_port: 9\n  ready_timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := l.tent(t, "create", "--policy", never)
	if r.code == 0 || !strings.Contains(r.stderr, "ready_port 9") || !strings.Contains(r.stderr, "still-booting") {
		t.Errorf("tent create with a service never ready: exit %d, stderr %q", r.code, r.stderr)
	}
	ls := l.tent(t, "ls", "-q")
	if got := strings.TrimSpace(ls.stdout); got != id {
		t.Errorf("tent ls -q after the failed create: %q, want only %s", got, id)
	}
}
