package serve

import (
	"context"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
)

// TestSecretAPI: E2B's secrets CRUD. A value is in no answer and only in
// the secret store (mode 0600), never in the secrets file (the index,
// mode 0600); a restarted server has the secrets.
func TestSecretAPI(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secrets.json")
	h := newHarness(t, Options{SecretsFile: file})
	const value = "sk-live-0123456789abcdef"
	r := h.do("POST", "/secrets", `{"name":"openai-api-key","value":"`+value+`","metadata":{"env":"test"}}`)
	created := decode[secretInfo](t, r)
	if r.status != http.StatusCreated || !strings.HasPrefix(created.ID, "sec_") || created.Name != "openai-api-key" || created.Version != 1 || created.Metadata["env"] != "test" || created.Created.IsZero() {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), value) || strings.Contains(string(r.body), `"value"`) {
		t.Fatalf("the create's answer holds the value: %s", r.body)
	}
	if r := h.do("POST", "/secrets", `{"name":"openai-api-key","value":"x"}`); r.status != http.StatusConflict {
		t.Fatalf("a second secret of that name: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ body, want string }{
		{`{"name":"","value":"x"}`, "name"},
		{`{"name":"a{b","value":"x"}`, "name"},
		{`{"name":"a\nb","value":"x"}`, "name"},
		{`{"name":"ok","value":""}`, "value: empty"},
		{`{"name":"ok","value":"a\r\nX-Injected: 1"}`, "CR, LF"},
		{`{"name":"ok","value":"x","metadata":{"":"v"}}`, "metadata"},
	} {
		if r := h.do("POST", "/secrets", c.body); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.body, r.status, r.body, c.want)
		}
	}
	// By id and by name; an update is a new version.
	for _, ref := range []string{created.ID, "openai-api-key"} {
		if got := decode[secretInfo](t, h.do("GET", "/secrets/"+ref, "")); got.ID != created.ID {
			t.Fatalf("GET /secrets/%s: %+v", ref, got)
		}
	}
	r = h.do("POST", "/secrets/"+created.ID, `{"value":"sk-live-rotated-000000"}`)
	if u := decode[secretInfo](t, r); r.status != http.StatusOK || u.Version != 2 || u.Metadata["env"] != "test" {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		if r := h.do(m, "/secrets/missing", `{"value":"x"}`); r.status != http.StatusNotFound {
			t.Errorf("%s a missing secret: %d %s", m, r.status, r.body)
		}
	}
	// Pages, oldest first.
	for _, n := range []string{"key-a", "key-b"} {
		if r := h.do("POST", "/secrets", `{"name":"`+n+`","value":"v"}`); r.status != http.StatusCreated {
			t.Fatal(r.status, string(r.body))
		}
	}
	r = h.do("GET", "/secrets?limit=2", "")
	page := decode[[]secretInfo](t, r)
	next := r.header.Get("X-Next-Token")
	if len(page) != 2 || page[0].Name != "openai-api-key" || next == "" {
		t.Fatalf("page 1: %+v next %q", page, next)
	}
	r = h.do("GET", "/secrets?limit=2&nextToken="+next, "")
	if page := decode[[]secretInfo](t, r); len(page) != 1 || page[0].Name != "key-b" || r.header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %+v", page)
	}
	if r := h.do("GET", "/secrets?limit=0", ""); r.status != http.StatusBadRequest {
		t.Errorf("limit 0: %d", r.status)
	}
	if r := h.do("DELETE", "/secrets/key-a", ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the secrets file: %v %v", fi, err)
	}
	// A restarted server has them; the value is only in the store.
	h2 := newHarness(t, Options{SecretsFile: file})
	if all := decode[[]secretInfo](t, h2.do("GET", "/secrets", "")); len(all) != 2 || all[0].Version != 2 {
		t.Fatalf("after a restart: %+v", all)
	}
	if b, _ := os.ReadFile(file); strings.Contains(string(b), "sk-live-rotated-000000") {
		t.Fatalf("the secrets file holds the value: %s", b)
	}
	if v, ok := h.opts.Secrets.LookupSecret(storeName("openai-api-key")); !ok || v != "sk-live-rotated-000000" {
		t.Fatalf("the store has %q %v, want the rotated value", v, ok)
	}
	if r := newHarness(t, Options{}).do("POST", "/secrets", `{"name":"x","value":"y"}`); r.status != http.StatusNotImplemented {
		t.Errorf("no SecretsFile: %d %s", r.status, r.body)
	}
}

// TestSecretFilledIntoRule: a header transform naming a secret
// (${e2b.secrets.NAME}, the SDKs' Secret.fill) gets its value in the
// sandbox's policy, for tent's proxy, and nowhere the server answers or
// saves; a name the store lacks is refused before anything is made.
func TestSecretFilledIntoRule(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	h := newHarness(t, Options{SecretsFile: filepath.Join(dir, "secrets.json"), StateFile: state})
	const value = "ghp_0123456789abcdefghij"
	if r := h.do("POST", "/secrets", `{"name":"gh","value":"`+value+`"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	body := `{"templateID":"base","network":{"allowOut":["api.github.com"],"denyOut":["0.0.0.0/0"],
		"rules":{"api.github.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.gh}"}}}]}}}`
	r := h.do("POST", "/v2/sandboxes", body)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), value) {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sandboxResponse](t, r).SandboxID
	info, err := h.f.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Spec.Network.Secrets; len(s) != 1 || s[0].Value != "" || s[0].Template != "Bearer ${"+storeName("gh")+"}" || s[0].Header != "Authorization" {
		t.Fatalf("the sandbox's policy: %+v", info.Spec.Network)
	}
	if r := h.do("GET", "/sandboxes/"+id, ""); strings.Contains(string(r.body), value) {
		t.Errorf("getInfo holds the value: %s", r.body)
	}
	h.s.save()
	if b, _ := os.ReadFile(state); strings.Contains(string(b), value) {
		t.Errorf("the state file holds the value")
	}
	// The policy names the secret: a filesystem-only pause needs no
	// exception.
	withPause := strings.Replace(body, `{"templateID":"base",`, `{"templateID":"base","autoPause":true,"autoPauseMemory":false,`, 1)
	if r := h.do("POST", "/v2/sandboxes", withPause); r.status != http.StatusCreated {
		t.Fatalf("autoPauseMemory false with header transforms: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/secrets", `{"name":"short","value":"abc"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	r = h.do("POST", "/v2/sandboxes", strings.Replace(body, "secrets.gh}", "secrets.short}", 1))
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, `secret "short" is shorter than 8 bytes`) {
		t.Fatalf("a short secret: %d %s", r.status, r.body)
	}
	n := len(h.f.calls)
	r = h.do("POST", "/v2/sandboxes", strings.Replace(body, "secrets.gh}", "secrets.nope}", 1))
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, `secret "nope" not found`) {
		t.Fatalf("a missing secret: %d %s", r.status, r.body)
	}
	// Text around a reference may not name another entry of the store
	// (a variable of tent's other frontends, another sandbox's scope):
	// a rule names E2B's secrets only.
	if err := h.opts.Secrets.Set("GITHUB_TOKEN", "ghp_cli-variable-value-0123"); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"${GITHUB_TOKEN}", "${" + storeName("gh") + "}"} {
		r = h.do("POST", "/v2/sandboxes", strings.Replace(body, "${e2b.secrets.gh}", "${e2b.secrets.gh}"+other, 1))
		if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, `"${" outside a secret's reference`) {
			t.Fatalf("a rule naming %s: %d %s", other, r.status, r.body)
		}
	}
	if len(h.f.calls) != n {
		t.Errorf("the backend was called for a refused create: %v", h.f.calls[n:])
	}
}

// TestSecretChangesReachSandboxes: a secret's update, destroy and
// re-create reach the running sandboxes whose rules name it (created with
// them or given them by an update), across a restart of the server,
// through the store their policies name (no policy is pushed); a
// destroyed secret's header is no longer added, the rules' other headers
// stay; sandboxes that do not use it are not touched; a value too short
// or too long for a rule is refused while a sandbox uses it.
func TestSecretChangesReachSandboxes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secrets.json")
	opts := Options{SecretsFile: file, StateFile: filepath.Join(dir, "state.json")}
	h := newHarness(t, opts)
	const v1, v2, v3, literal = "ghp_first-value-0123", "ghp_second-value-4567", "ghp_third-value-8901", "literal-header-value"
	if r := h.do("POST", "/secrets", `{"name":"gh","value":"`+v1+`"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	limited := `{"templateID":"base","network":{"allowOut":["api.github.com"],"denyOut":["0.0.0.0/0"]`
	rules := `"rules":{"api.github.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.gh}","X-Lit":"` + literal + `"}}}]}`
	created := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", limited+`,`+rules+`}}`)).SandboxID
	updated := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", limited+`}}`)).SandboxID
	if r := h.do("PUT", "/sandboxes/"+updated+"/network", `{"allowOut":["api.github.com"],"denyOut":["0.0.0.0/0"],`+rules+`}`); r.status != http.StatusNoContent {
		t.Fatalf("an update with rules: %d %s", r.status, r.body)
	}
	bystander := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", limited+`}}`)).SandboxID
	headers := h.secretHeaders
	check := func(when string, want map[string]string) {
		t.Helper()
		for _, id := range []string{created, updated} {
			if got := headers(id); !maps.Equal(got, want) {
				t.Errorf("%s: sandbox %s's header transforms %v, want %v", when, id, got, want)
			}
		}
		if got := headers(bystander); len(got) != 0 {
			t.Errorf("%s: the sandbox without rules has %v", when, got)
		}
	}
	check("created", map[string]string{"Authorization": "Bearer " + v1, "X-Lit": literal})
	calls := func() int { return h.f.count("SetNetworkPolicy") }
	before := calls()
	if r := h.do("POST", "/secrets/gh", `{"value":"`+v2+`"}`); r.status != http.StatusOK {
		t.Fatal(r.status, string(r.body))
	}
	check("updated", map[string]string{"Authorization": "Bearer " + v2, "X-Lit": literal})
	if n := calls() - before; n != 0 {
		t.Errorf("an update made %d policy changes, want none (the store is the change)", n)
	}
	r := h.do("POST", "/secrets/gh", `{"value":"short"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "running sandbox "+created) || !strings.Contains(r.errBody(t).Message, "shorter than 8 bytes") {
		t.Errorf("a short value for a secret in use: %d %s", r.status, r.body)
	}
	// 16 KiB is a secret's bound, but "Bearer " and it is over a header
	// transform's.
	r = h.do("POST", "/secrets/gh", `{"value":"`+strings.Repeat("v", maxSecretValue)+`"}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "cannot take this value") {
		t.Errorf("a value too long for a rule: %d %.300s", r.status, r.body)
	}
	check("after the refused updates", map[string]string{"Authorization": "Bearer " + v2, "X-Lit": literal})
	if info := decode[secretInfo](t, h.do("GET", "/secrets/gh", "")); info.Version != 2 {
		t.Errorf("the refused updates made versions: %+v", info)
	}
	b, err := os.ReadFile(file)
	if err != nil || strings.Contains(string(b), "${e2b.secrets.gh}") || strings.Contains(string(b), created) || strings.Contains(string(b), v2) {
		t.Errorf("the secrets file keeps rules or a value: %v\n%s", err, b)
	}

	// A rule names a secret by name, never by id (the sandboxes using a
	// secret are found by its name).
	gh := decode[secretInfo](t, h.do("GET", "/secrets/gh", ""))
	if r := h.do("POST", "/v2/sandboxes", limited+`,"rules":{"api.github.com":[{"transform":{"headers":{"X-Id":"${e2b.secrets.`+gh.ID+`}"}}}]}}}`); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "not found") {
		t.Errorf("a rule naming a secret by id: %d %s", r.status, r.body)
	}
	// A restarted server still reaches them (the store is the change).
	h.restart(nil)
	if r := h.do("DELETE", "/secrets/gh", ""); r.status != http.StatusNoContent {
		t.Fatal(r.status, string(r.body))
	}
	check("destroyed", map[string]string{"X-Lit": literal})
	if r := h.do("POST", "/secrets", `{"name":"gh","value":"`+v3+`"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	check("created again", map[string]string{"Authorization": "Bearer " + v3, "X-Lit": literal})

	secretsTwoInOneSandbox(t, h, limited, v1, v2)

	for _, id := range []string{created, updated} {
		if r := h.do("DELETE", "/sandboxes/"+id, ""); r.status != http.StatusNoContent {
			t.Fatal(r.status, string(r.body))
		}
	}
	if b, _ := os.ReadFile(opts.StateFile); strings.Contains(string(b), v1) || strings.Contains(string(b), v3) || strings.Contains(string(b), literal) {
		t.Errorf("the state file holds a value")
	}
}

// secretHeaders returns sandbox id's header transforms on the fake
// backend as its proxy would send them now: header → value (a template
// filled from the store; a revoked one left out).
func (h *harness) secretHeaders(id string) map[string]string {
	h.t.Helper()
	info, err := h.f.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	m := map[string]string{}
	for _, s := range info.Spec.Network.Secrets {
		if s.Template == "" {
			m[s.Header] = s.Value
		} else if v, _, err := netpolicy.FillTemplate(s.Template, h.s.secrets.store); err == nil {
			m[s.Header] = v // as the proxy fills it for the next request
		}
	}
	return m
}

// count is how many times method was called on f.
func (f *fakeBackend) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == method {
			n++
		}
	}
	return n
}

// secretsTwoInOneSandbox is TestSecretChangesReachSandboxes' sandbox
// whose rules name two secrets, gh and other (made here with v1): one
// revoked does not keep the other from rotating (to v2); created again
// too short, it is refused (its header would be left out silently).
func secretsTwoInOneSandbox(t *testing.T, h *harness, limited, v1, v2 string) {
	if r := h.do("POST", "/secrets", `{"name":"other","value":"`+v1+`"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	two := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", limited+`,"rules":{"api.github.com":[{"transform":{"headers":{"X-A":"${e2b.secrets.gh}","X-B":"${e2b.secrets.other}"}}}]}}}`)).SandboxID
	if r := h.do("DELETE", "/secrets/other", ""); r.status != http.StatusNoContent {
		t.Fatal(r.status, string(r.body))
	}
	if r := h.do("POST", "/secrets/gh", `{"value":"`+v2+`"}`); r.status != http.StatusOK {
		t.Fatalf("rotating a secret beside a revoked one: %d %s", r.status, r.body)
	}
	if got := h.secretHeaders(two); !maps.Equal(got, map[string]string{"X-A": v2}) {
		t.Errorf("the sandbox with a revoked and a rotated secret: %v", got)
	}
	if r := h.do("POST", "/secrets", `{"name":"other","value":"short"}`); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "running sandbox "+two) || !strings.Contains(r.errBody(t).Message, "shorter than 8 bytes") {
		t.Errorf("a secret in use created again too short: %d %s", r.status, r.body)
	}
}

// TestSecretsFileOfAnEarlierServer: the secrets file of an earlier
// server (the list alone, or the list and the rules of the sandboxes
// using them), which held the values, is migrated once at start: the
// values go to the store, the file is written again without them or the
// rules; a value too short for a rule goes nowhere.
func TestSecretsFileOfAnEarlierServer(t *testing.T) {
	for _, old := range []string{
		`[{"secretID":"sec_0123","name":"gh","value":"ghp_old-server-value","currentVersion":3,"metadata":{},"createdAt":"2026-11-28T10:00:00Z","updatedAt":"2026-11-28T10:00:00Z"},` +
			`{"secretID":"sec_4567","name":"tiny","value":"abc","currentVersion":1,"metadata":{},"createdAt":"2026-11-28T10:00:00Z","updatedAt":"2026-11-28T10:00:00Z"}]`,
		`{"secrets":[{"secretID":"sec_0123","name":"gh","value":"ghp_old-server-value","currentVersion":3,"metadata":{},"createdAt":"2026-11-28T10:00:00Z","updatedAt":"2026-11-28T10:00:00Z"},` +
			`{"secretID":"sec_4567","name":"tiny","value":"abc","currentVersion":1,"metadata":{},"createdAt":"2026-11-28T10:00:00Z","updatedAt":"2026-11-28T10:00:00Z"}],` +
			`"rules":{"sbx1":{"api.github.com":[{"transform":{"headers":{"X":"${e2b.secrets.gh}"}}}]}}}`,
	} {
		file := filepath.Join(t.TempDir(), "secrets.json")
		if err := os.WriteFile(file, []byte(old), 0o600); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, Options{SecretsFile: file})
		if info := decode[secretInfo](t, h.do("GET", "/secrets/gh", "")); info.ID != "sec_0123" || info.Version != 3 {
			t.Fatalf("the earlier server's secret: %+v", info)
		}
		b, _ := os.ReadFile(file)
		if !strings.HasPrefix(string(b), `{"secrets":[{"secretID":"sec_0123"`) || strings.Contains(string(b), "ghp_old-server-value") || strings.Contains(string(b), `"abc"`) || strings.Contains(string(b), "rules") {
			t.Errorf("the file after the start: %s", b)
		}
		if v, ok := h.opts.Secrets.LookupSecret(storeName("gh")); !ok || v != "ghp_old-server-value" {
			t.Errorf("the store after the start: %q %v", v, ok)
		}
		if _, ok := h.opts.Secrets.LookupSecret(storeName("tiny")); ok {
			t.Errorf("a value too short for a rule went to the store")
		}
		if r := h.do("POST", "/secrets/gh", `{"value":"ghp_new-server-value"}`); r.status != http.StatusOK {
			t.Fatal(r.status, string(r.body))
		}
		if v, _ := h.opts.Secrets.LookupSecret(storeName("gh")); v != "ghp_new-server-value" {
			t.Errorf("the store after an update: %q", v)
		}
	}
}
