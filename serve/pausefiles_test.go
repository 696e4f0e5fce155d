package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestFilesystemOnlyPause: pause with memory: false keeps the sandbox's
// files (its home, /tmp, /root) and ends its processes; the sandbox is
// paused (stopped for the backend), its in-sandbox API answers 502 and
// its snapshot is not listed; connect brings it back under the same id
// and token, with the files and without the processes, booted anew (a
// new boot id), and removes the snapshot. A create with autoPauseMemory: false does the same at its
// timeout.
func TestFilesystemOnlyPause(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	ctx := context.Background()
	snaps := t.TempDir()
	local := newTestLocal(t, sandbox.LocalOptions{SnapshotDir: snaps})
	h := serveOver(t, local, Options{})
	sh := func(id, script string) string { t.Helper(); return shIn(t, local, id, script) }
	sleepers := func(id string) string {
		return sh(id, `for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | grep -c '^sleep$' || true`)
	}
	snapshotDirs := func() int {
		t.Helper()
		ents, err := os.ReadDir(snaps)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return len(ents)
	}

	sb := decode[sandboxResponse](t, h.do("POST", "/sandboxes", pythonCreateBody))
	id := sb.SandboxID
	sh(id, `echo home > ~/kept; echo tmp > /tmp/kept; echo root > /root/kept; sleep 1000 >/dev/null 2>&1 &`)
	if got := sleepers(id); got != "1" {
		t.Fatalf("%s sleep processes before the pause, want 1", got)
	}
	bootBefore := sh(id, `cat /proc/sys/kernel/random/boot_id`)
	if r := h.do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`); r.status != http.StatusNoContent {
		t.Fatalf("pause memory:false: %d %s", r.status, r.body)
	}
	if info, err := infoOf(ctx, local, id); err != nil || info.State != sandbox.StateStopped {
		t.Fatalf("after the pause: %s, %v; want stopped", info.State, err)
	}
	if d := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+id, "")); d.State != "paused" {
		t.Fatalf("getInfo state %q, want paused", d.State)
	}
	if r := h.do("GET", "/health", "", "X-API-Key", "", headerSandboxID, id, headerAccessToken, sb.EnvdAccessToken); r.status != http.StatusBadGateway {
		t.Fatalf("in-sandbox request while paused: %d %s, want 502", r.status, r.body)
	}
	if r := h.do("GET", "/snapshots", ""); r.status != http.StatusOK || strings.Contains(string(r.body), id) {
		t.Fatalf("the pause's snapshot is listed: %d %s", r.status, r.body)
	}
	if n := snapshotDirs(); n != 1 {
		t.Fatalf("%d snapshots in the store after the pause, want 1", n)
	}
	if r := h.do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`); r.status != http.StatusConflict {
		t.Fatalf("second pause: %d %s, want 409", r.status, r.body)
	}
	r := h.do("POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`)
	if c := decode[sandboxResponse](t, r); r.status != http.StatusCreated || c.SandboxID != id || c.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect: %d %s", r.status, r.body)
	}
	if got := sh(id, `cat ~/kept /tmp/kept /root/kept`); got != "home\ntmp\nroot" {
		t.Errorf("files after the resume: %q", got)
	}
	if got := sleepers(id); got != "0" {
		t.Errorf("%s sleep processes after the resume, want 0: the pause kept processes", got)
	}
	if got := sh(id, `cat /proc/sys/kernel/random/boot_id`); got == bootBefore {
		t.Errorf("boot id %s unchanged by the cold boot", got)
	}
	if r := h.do("GET", "/health", "", "X-API-Key", "", headerSandboxID, id, headerAccessToken, sb.EnvdAccessToken); r.status != http.StatusNoContent {
		t.Fatalf("in-sandbox request after the resume: %d %s", r.status, r.body)
	}
	if n := snapshotDirs(); n != 0 {
		t.Errorf("%d snapshots left in the store after the resume, want 0", n)
	}

	// At the timeout, with autoPauseMemory: false.
	if r := h.do("POST", "/sandboxes", `{"templateID":"base","timeout":1,"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`); r.status != http.StatusBadRequest {
		t.Fatalf("autoResume with a filesystem-only pause: %d %s, want 400", r.status, r.body)
	}
	auto := decode[sandboxResponse](t, h.do("POST", "/sandboxes", `{"templateID":"base","timeout":2,"autoPause":true,"autoPauseMemory":false}`))
	sh(auto.SandboxID, `echo marker > ~/marker`)
	waitFor(t, 30*time.Second, func() bool {
		info, err := infoOf(ctx, local, auto.SandboxID)
		return err == nil && info.State == sandbox.StateStopped
	})
	if r := h.do("POST", "/v2/sandboxes/"+auto.SandboxID+"/connect", `{"timeout":60}`); r.status != http.StatusCreated {
		t.Fatalf("connect after the timeout: %d %s", r.status, r.body)
	}
	if got := sh(auto.SandboxID, `cat ~/marker`); got != "marker" {
		t.Errorf("marker after the timeout's pause: %q", got)
	}
	// Killing a paused sandbox removes its snapshot too.
	if r := h.do("POST", "/sandboxes/"+auto.SandboxID+"/pause", `{"memory":false}`); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := h.do("DELETE", "/sandboxes/"+auto.SandboxID, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if n := snapshotDirs(); n != 0 {
		t.Errorf("%d snapshots left in the store after the kill, want 0", n)
	}
}

// TestFilesystemOnlyPauseSurvivesRestart: a restarted server takes up a
// filesystem-only pause's snapshot from its state file, and removes it
// when the sandbox is killed; a state file naming any other directory
// (not a snapshot of that sandbox) makes it remove nothing.
func TestFilesystemOnlyPauseSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	ctx := context.Background()
	snaps := t.TempDir()
	local := newTestLocal(t, sandbox.LocalOptions{SnapshotDir: snaps})
	state := filepath.Join(t.TempDir(), "serve-state.json")
	start := func() (*Server, *harness) {
		s, err := New(local, Options{APIKey: testKey, StateFile: state})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		return s, &harness{t: t, s: s, url: ts.URL}
	}
	s, h := start()
	var ids []string
	for range 2 {
		id := decode[sandboxResponse](t, h.do("POST", "/sandboxes", pythonCreateBody)).SandboxID
		if r := h.do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`); r.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		ids = append(ids, id)
	}
	if err := s.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	var saved savedState
	b, err := os.ReadFile(state)
	if err != nil || json.Unmarshal(b, &saved) != nil || saved.Sandboxes[ids[0]] == nil || saved.Sandboxes[ids[1]] == nil {
		t.Fatalf("state file %s: %v", b, err)
	}
	genuine := saved.Sandboxes[ids[0]].PauseSnapshot
	if filepath.Dir(genuine) != snaps {
		t.Fatalf("pause snapshot %q, want one in %s", genuine, snaps)
	}
	// The second sandbox's entry now names a directory of someone else's.
	victim := filepath.Join(t.TempDir(), filepath.Base(saved.Sandboxes[ids[1]].PauseSnapshot))
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	saved.Sandboxes[ids[1]].PauseSnapshot = victim
	if b, err = json.Marshal(saved); err != nil || os.WriteFile(state, b, 0o600) != nil {
		t.Fatal(err)
	}

	s, h = start()
	t.Cleanup(func() { _ = s.Close(ctx, false) })
	for _, id := range ids {
		if r := h.do("DELETE", "/sandboxes/"+id, ""); r.status != http.StatusNoContent {
			t.Fatalf("kill %s: %d %s", id, r.status, r.body)
		}
	}
	if _, err := os.Stat(genuine); !os.IsNotExist(err) {
		t.Errorf("the pause snapshot %s is left after the kill (%v)", genuine, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("a directory the state file named, not a snapshot of the sandbox, was removed: %v", err)
	}
}
