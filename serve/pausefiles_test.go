package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
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
	local, err := sandbox.NewLocal(sandbox.LocalOptions{SnapshotDir: snaps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close(ctx) })
	s, err := New(local, Options{APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx, false) })
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	h := &harness{t: t, s: s, url: ts.URL}
	sh := func(id, script string) string {
		t.Helper()
		res, err := local.Exec(ctx, id, sandbox.ExecRequest{Args: []string{"sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s in %s: %v %+v", script, id, err, res)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
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
	if info, err := local.Get(ctx, id); err != nil || info.State != sandbox.StateStopped {
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
		info, err := local.Get(ctx, auto.SandboxID)
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
