package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestTimeoutKillsAndMoves(t *testing.T) {
	h := newHarness(t, Options{})
	short := h.create(`{"timeout":1}`)
	moved := h.create(`{"timeout":1}`)
	if r := h.do("POST", "/sandboxes/"+moved.SandboxID+"/timeout", `{"timeout":30}`); r.status != http.StatusNoContent {
		t.Fatalf("setTimeout: %d %s", r.status, r.body)
	}
	waitFor(t, 5*time.Second, func() bool { return !h.f.has(short.SandboxID) })
	if !h.f.has(moved.SandboxID) {
		t.Fatal("setTimeout(30s) did not move the 1 s timeout")
	}
	if r := h.do("POST", "/sandboxes/"+moved.SandboxID+"/timeout", `{"timeout":1}`); r.status != http.StatusNoContent {
		t.Fatalf("setTimeout: %d %s", r.status, r.body)
	}
	waitFor(t, 5*time.Second, func() bool { return !h.f.has(moved.SandboxID) })
	if r := h.do("POST", "/sandboxes/"+moved.SandboxID+"/timeout", `{"timeout":1}`); r.status != http.StatusNotFound {
		t.Fatalf("setTimeout of a killed sandbox: %d %s", r.status, r.body)
	}
	// setTimeout(0) ends it now, as in E2B; under 0 is refused, and so is
	// 0 where it would mean no timeout at all (connect, refresh).
	now := h.create(`{"timeout":300}`)
	for _, c := range []struct{ path, body, field string }{
		{"/timeout", `{"timeout":-1}`, "timeout"},
		{"/refreshes", `{"duration":0}`, "duration"},
		{"/connect", `{"timeout":0}`, "timeout"},
	} {
		if r := h.do("POST", "/sandboxes/"+now.SandboxID+c.path, c.body); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), c.field+":") {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, r.status, r.body, c.field)
		}
	}
	if r := h.do("POST", "/sandboxes/"+now.SandboxID+"/timeout", `{"timeout":0}`); r.status != http.StatusNoContent {
		t.Fatalf("setTimeout(0): %d %s", r.status, r.body)
	}
	waitFor(t, 5*time.Second, func() bool { return !h.f.has(now.SandboxID) })
}

func TestPauseConnectAndAutoPause(t *testing.T) {
	h := newHarness(t, Options{})
	sb := h.create(`{"timeout":60}`)
	path := "/sandboxes/" + sb.SandboxID
	if r := h.do("POST", path+"/pause", `{}`); r.status != http.StatusNoContent || h.f.state(sb.SandboxID) != sandbox.StateSuspended {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := h.do("POST", path+"/pause", ``); r.status != http.StatusConflict {
		t.Fatalf("second pause: %d %s", r.status, r.body)
	}
	if d := decode[sandboxDetail](t, h.do("GET", path, "")); d.State != "paused" {
		t.Fatalf("state %q after pause", d.State)
	}
	r := h.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60}`)
	if c := decode[sandboxResponse](t, r); r.status != http.StatusCreated || c.EnvdAccessToken != sb.EnvdAccessToken || c.TemplateID != "base" {
		t.Fatalf("connect to paused: %d %s", r.status, r.body)
	}
	if h.f.state(sb.SandboxID) != sandbox.StateRunning {
		t.Fatal("connect did not resume")
	}
	if r = h.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", ``); r.status != http.StatusOK {
		t.Fatalf("connect to running: %d %s", r.status, r.body)
	}
	if r = h.do("POST", "/sandboxes/"+sb.SandboxID+"/resume", `{}`); r.status != http.StatusConflict {
		t.Fatalf("resume of running: %d %s", r.status, r.body)
	}
	// connect({onResume: 'reboot'}) of a frozen sandbox: a cold boot from
	// its files (snapshot, stop, resume from it).
	if r = h.do("POST", path+"/pause", `{}`); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	h.f.mu.Lock()
	h.f.calls = nil
	h.f.mu.Unlock()
	if r = h.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":60,"memory":false}`); r.status != http.StatusCreated {
		t.Fatalf("connect memory:false: %d %s", r.status, r.body)
	}
	h.f.mu.Lock()
	calls := strings.Join(h.f.calls, ",")
	h.f.mu.Unlock()
	if !strings.Contains(calls, "Snapshot,Stop,Resume") || h.f.state(sb.SandboxID) != sandbox.StateRunning {
		t.Fatalf("connect memory:false of a frozen sandbox: calls %s, state %s; want Snapshot,Stop,Resume and running", calls, h.f.state(sb.SandboxID))
	}
	if r = h.do("POST", "/v2/sandboxes/0123456789abcdef/connect", `{}`); r.status != http.StatusNotFound {
		t.Fatalf("connect to unknown: %d %s", r.status, r.body)
	}

	auto := h.create(`{"timeout":1,"autoPause":true,"autoResume":{"enabled":true}}`)
	waitFor(t, 5*time.Second, func() bool { return h.f.state(auto.SandboxID) == sandbox.StateSuspended })
	// The first in-sandbox request resumes it.
	r = h.do("GET", "/health", "", "X-API-Key", "", headerSandboxID, auto.SandboxID, headerAccessToken, auto.EnvdAccessToken)
	if r.status != http.StatusOK || h.f.state(auto.SandboxID) != sandbox.StateRunning {
		t.Fatalf("auto-resume: %d %s, state %s", r.status, r.body, h.f.state(auto.SandboxID))
	}

	h.f.caps.Suspend = false
	if r = h.do("POST", "/v2/sandboxes", `{"autoPause":true}`); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "freezer") {
		t.Fatalf("autoPause without a freezer: %d %s", r.status, r.body)
	}
	if r = h.do("POST", path+"/pause", ``); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "freezer") {
		t.Fatalf("pause without a freezer: %d %s", r.status, r.body)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	h := newHarness(t, Options{})
	var ids []string
	for i := range 5 {
		app := "a"
		if i%2 == 1 {
			app = "b&c=d"
		}
		ids = append(ids, h.create(fmt.Sprintf(`{"metadata":{"app":%q,"n":"%d"}}`, app, i)).SandboxID)
		time.Sleep(2 * time.Millisecond) // distinct start times
	}
	h.do("POST", "/sandboxes/"+ids[0]+"/pause", "")
	list := func(q string) ([]string, response) {
		r := h.do("GET", "/v2/sandboxes?"+q, "")
		if r.status != http.StatusOK {
			t.Fatalf("list ?%s: %d %s", q, r.status, r.body)
		}
		var got []string
		for _, l := range decode[[]listedSandbox](t, r) {
			got = append(got, l.SandboxID)
		}
		return got, r
	}
	// The SDK encodes each key and value, then the pairs as a query, then
	// the whole as the parameter's value.
	md := "metadata=" + url.QueryEscape("app="+url.QueryEscape(url.QueryEscape("b&c=d")))
	if got, _ := list(md); fmt.Sprint(got) != fmt.Sprint([]string{ids[3], ids[1]}) {
		t.Errorf("metadata filter: %v", got)
	}
	if got, _ := list("state=paused"); fmt.Sprint(got) != fmt.Sprint([]string{ids[0]}) {
		t.Errorf("state=paused: %v", got)
	}
	if got, r := list("state=running,paused&order=asc&limit=2"); fmt.Sprint(got) != fmt.Sprint(ids[:2]) || r.header.Get("X-Next-Token") == "" || r.header.Get("X-Total-Running") != "4" {
		t.Errorf("first page: %v, headers %v", got, r.header)
	} else {
		got2, r2 := list("order=asc&limit=2&nextToken=" + r.header.Get("X-Next-Token"))
		got3, r3 := list("order=asc&limit=2&nextToken=" + r2.header.Get("X-Next-Token"))
		if fmt.Sprint(got2) != fmt.Sprint(ids[2:4]) || fmt.Sprint(got3) != fmt.Sprint(ids[4:]) || r3.header.Get("X-Next-Token") != "" {
			t.Errorf("pages 2 and 3: %v %v (next %q)", got2, got3, r3.header.Get("X-Next-Token"))
		}
	}
	for _, q := range []string{"state=gone", "limit=0", "limit=101", "order=up", "nextToken=abc", "startedAfter=yesterday"} {
		if r := h.do("GET", "/v2/sandboxes?"+q, ""); r.status != http.StatusBadRequest {
			t.Errorf("list ?%s: %d, want 400", q, r.status)
		}
	}
	r := h.do("GET", "/sandboxes", "")
	if l := decode[[]listedSandbox](t, r); len(l) != 4 {
		t.Errorf("v1 list (running only): %d sandboxes", len(l))
	}
}

func TestSnapshotsAndForks(t *testing.T) {
	h := newHarness(t, Options{})
	src := h.create(`{"metadata":{"who":"src"}}`)
	r := h.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", `{"name":"my-snap"}`)
	snap := decode[snapshotInfo](t, r)
	if r.status != http.StatusCreated || snap.SnapshotID == "" || fmt.Sprint(snap.Names) != "[my-snap]" {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	for _, tmpl := range []string{"my-snap", snap.SnapshotID} {
		sb := h.create(`{"templateID":"` + tmpl + `","metadata":{"who":"copy"}}`)
		d := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+sb.SandboxID, ""))
		if d.TemplateID != tmpl || d.Metadata["who"] != "copy" {
			t.Errorf("sandbox from %s: template %q metadata %v", tmpl, d.TemplateID, d.Metadata)
		}
	}
	r = h.do("GET", "/snapshots?sandboxID="+src.SandboxID, "")
	if l := decode[[]snapshotInfo](t, r); len(l) != 1 || l[0].SnapshotID != snap.SnapshotID {
		t.Errorf("list snapshots: %s", r.body)
	}
	// A fork's snapshot is only its starting point: gone once the forks
	// are made (the named snapshot above stays).
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.f.mu.Lock()
	h.f.snapRoot = root
	h.f.mu.Unlock()
	r = h.do("POST", "/sandboxes/"+src.SandboxID+"/fork", `{"count":2,"timeout":30}`)
	forks := decode[[]forkResult](t, r)
	if r.status != http.StatusCreated || len(forks) != 2 || forks[0].Sandbox == nil || forks[1].Sandbox == nil || forks[0].Sandbox.SandboxID == forks[1].Sandbox.SandboxID {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	if left, _ := os.ReadDir(root); len(left) != 1 || left[0].Name() != "keep" {
		t.Errorf("after the fork the snapshot directory holds %v, want only the unrelated keep", left)
	}
	d := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+forks[0].Sandbox.SandboxID, ""))
	if d.Metadata["who"] != "src" || d.TemplateID != "base" {
		t.Errorf("fork: %+v", d)
	}
	if r = h.do("POST", "/sandboxes/"+src.SandboxID+"/fork", `{"count":17}`); r.status != http.StatusBadRequest {
		t.Errorf("17 forks: %d", r.status)
	}
	h.f.fail("Fork", errors.New("no room"))
	r = h.do("POST", "/sandboxes/"+src.SandboxID+"/fork", ``)
	if forks = decode[[]forkResult](t, r); r.status != http.StatusCreated || len(forks) != 1 || forks[0].Error == nil || forks[0].Error.Code != 500 {
		t.Errorf("failing fork: %d %s", r.status, r.body)
	}
}

func TestNetworkUpdate(t *testing.T) {
	h := newHarness(t, Options{})
	limited := h.create(`{"network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}}`)
	info, _ := h.f.Get(context.Background(), limited.SandboxID)
	if info.Spec.Network.Mode != "limited" || fmt.Sprint(info.Spec.Network.AllowedHosts) != "[example.com]" {
		t.Fatalf("create with rules: network %+v", info.Spec.Network)
	}
	path := "/sandboxes/" + limited.SandboxID + "/network"
	if r := h.do("PUT", path, `{"allowOut":["127.0.0.1","api.example.org:443"],"denyOut":["0.0.0.0/0"]}`); r.status != http.StatusNoContent {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	info, _ = h.f.Get(context.Background(), limited.SandboxID)
	if fmt.Sprint(info.Spec.Network.AllowedHosts) != "[127.0.0.1 api.example.org:443]" {
		t.Fatalf("after update: %+v", info.Spec.Network)
	}
	d := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+limited.SandboxID, ""))
	if d.Network == nil || fmt.Sprint(d.Network.AllowOut) != "[127.0.0.1 api.example.org:443]" {
		t.Errorf("getInfo network: %+v", d.Network)
	}
	if r := h.do("PUT", path, `{}`); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "open internet") {
		t.Fatalf("update to the open internet: %d %s", r.status, r.body)
	}
	none := h.create(`{}`)
	path = "/sandboxes/" + none.SandboxID + "/network"
	if r := h.do("PUT", path, `{"allow_internet_access":false}`); r.status != http.StatusNoContent {
		t.Fatalf("deny all on a sandbox without network: %d %s", r.status, r.body)
	}
	if r := h.do("PUT", path, `{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}`); r.status != http.StatusConflict || !strings.Contains(r.errBody(t).Message, "created without network rules") {
		t.Fatalf("allow on a sandbox without network: %d %s", r.status, r.body)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, Options{})
	sb := h.create(`{}`)
	r := h.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", "")
	m := decode[[]sandboxMetric](t, r)
	if r.status != http.StatusOK || len(m) != 1 || m[0].MemUsed != 3<<20 || m[0].MemTotal != 256<<20 || m[0].CPUCount < 1 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	if r = h.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics?end=1", ""); string(bytes.TrimSpace(r.body)) != "[]" {
		t.Errorf("metrics ending in 1970: %s", r.body)
	}
	h.f.fail("Usage", fmt.Errorf("no cgroup: %w", sandbox.ErrUnsupported))
	if r = h.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", ""); r.status != http.StatusOK || string(bytes.TrimSpace(r.body)) != "[]" {
		t.Errorf("metrics without a cgroup: %d %s", r.status, r.body)
	}
}

func TestCloseKillsOnlyItsOwn(t *testing.T) {
	h := newHarness(t, Options{})
	own := h.create(`{}`)
	other, _ := h.f.Provision(context.Background(), sandbox.Spec{}) // as tent create would
	if err := h.s.Close(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if h.f.has(own.SandboxID) || !h.f.has(other.ID) {
		t.Fatalf("after Close: own sandbox kept %v, other sandbox kept %v", h.f.has(own.SandboxID), h.f.has(other.ID))
	}

	h = newHarness(t, Options{})
	own = h.create(`{}`)
	if err := h.s.Close(context.Background(), true); err != nil || !h.f.has(own.SandboxID) {
		t.Fatalf("Close keeping sandboxes: %v, kept %v", err, h.f.has(own.SandboxID))
	}
}
