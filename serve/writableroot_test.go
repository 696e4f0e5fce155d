package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestWritableRoot: as on E2B, the sandbox's user writes new files and
// directories at / (the files API as E2B's writeFiles test does, and
// commands), in the sandbox's own root: /usr stays read-only (EROFS);
// a filesystem-only pause and resume keep what was written, and a fork
// has it, its own.
func TestWritableRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	local := newTestLocal(t, sandbox.LocalOptions{SnapshotDir: t.TempDir()})
	h := serveOver(t, local, Options{})
	sh := func(id, script string) string { t.Helper(); return shIn(t, local, id, script) }

	sb := decode[sandboxResponse](t, h.do("POST", "/sandboxes", pythonCreateBody))
	id := sb.SandboxID
	r := h.do("POST", "/files?path=/0/multi_test_file0.txt", "This is a test file 0.", headerSandboxID, id,
		headerAccessToken, sb.EnvdAccessToken, "Content-Type", "application/octet-stream")
	var entries []struct{ Path string }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &entries) != nil || len(entries) != 1 || entries[0].Path != "/0/multi_test_file0.txt" {
		t.Fatalf("upload of /0/multi_test_file0.txt: %d %s", r.status, r.body)
	}
	if got := sh(id, `cat /0/multi_test_file0.txt; echo; stat -c %u /0/multi_test_file0.txt; mkdir /work && echo w > /work/w && cat /work/w`); got != "This is a test file 0.\n1000\nw" {
		t.Errorf("the file at /0 and a new /work: %q", got)
	}
	for _, p := range []string{"/usr/x", "/etc/x"} {
		if got := sh(id, `(echo x > `+p+`) 2>&1 || true`); !strings.Contains(got, "Read-only file system") {
			t.Errorf("writing %s: %q, want EROFS", p, got)
		}
	}
	r = h.do("POST", "/files?path=/usr/x", "x", headerSandboxID, id,
		headerAccessToken, sb.EnvdAccessToken, "Content-Type", "application/octet-stream")
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "read-only file system") {
		t.Errorf("upload to /usr/x: %d %s, want a refusal naming EROFS", r.status, r.body)
	}

	// A filesystem-only pause keeps it; the resumed sandbox is the same.
	if r := h.do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`); r.status != http.StatusNoContent {
		t.Fatalf("pause memory:false: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`); r.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", r.status, r.body)
	}
	if got := sh(id, `cat /0/multi_test_file0.txt /work/w`); got != "This is a test file 0.w" {
		t.Errorf("after the resume: %q", got)
	}
	// A fork has it, and its changes are its own.
	forks := decode[[]forkResult](t, h.do("POST", "/sandboxes/"+id+"/fork", `{}`))
	if len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork: %+v", forks)
	}
	fork := forks[0].Sandbox.SandboxID
	if got := sh(fork, `cat /work/w; echo fork > /work/w; touch /0/only-fork`); got != "w" {
		t.Errorf("the fork's /work/w: %q", got)
	}
	if got := sh(id, `cat /work/w; ls /0`); got != "w\nmulti_test_file0.txt" {
		t.Errorf("the fork's changes reached the original: %q", got)
	}
}
