package serve

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestControlPlaneNeedsTheAPIKey(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.do("GET", "/v2/sandboxes", "", "X-API-Key", "")
	if r.status != http.StatusUnauthorized || !strings.Contains(r.errBody(t).Message, "missing API key") {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	for _, key := range []string{"wrong", testKey + "x", strings.ToUpper(testKey)} {
		r = h.do("POST", "/v2/sandboxes", `{"templateID":"base"}`, "X-API-Key", key)
		if r.status != http.StatusUnauthorized || r.errBody(t).Message != "invalid API key" {
			t.Fatalf("key %q: %d %s", key, r.status, r.body)
		}
	}
	if n := len(h.f.calls); n != 0 {
		t.Fatalf("the backend was called %d times without a valid key: %v", n, h.f.calls)
	}
	if r = h.do("GET", "/v2/sandboxes", ""); r.status != http.StatusOK {
		t.Fatalf("valid key: %d %s", r.status, r.body)
	}
}

func TestCreateGetListKill(t *testing.T) {
	h := newHarness(t, Options{})
	sr := h.create(`{"templateID":"base","timeout":60,"metadata":{"user":"ann","app":"x y"},"envVars":{"B":"2","A":"1"}}`)
	if sr.SandboxID == "" || sr.EnvdAccessToken == "" || sr.TemplateID != "base" || sr.EnvdVersion != defaultEnvdVersion {
		t.Fatalf("create answered %+v", sr)
	}
	info, err := h.f.Get(context.Background(), sr.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(info.Spec.Env, ","); got != "A=1,B=2" {
		t.Errorf("spec env %q, want A=1,B=2", got)
	}
	if info.Spec.Labels["user"] != "ann" || info.Spec.Labels[labelTemplate] != "base" {
		t.Errorf("spec labels %v", info.Spec.Labels)
	}

	r := h.do("GET", "/sandboxes/"+sr.SandboxID, "")
	d := decode[sandboxDetail](t, r)
	if r.status != http.StatusOK || d.SandboxID != sr.SandboxID || d.State != "running" || d.Metadata["app"] != "x y" ||
		len(d.Metadata) != 2 || d.EnvdAccessToken != sr.EnvdAccessToken || d.Lifecycle.OnTimeout != "kill" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	end, _ := time.Parse(time.RFC3339Nano, d.EndAt)
	if left := time.Until(end); left < 55*time.Second || left > 61*time.Second {
		t.Errorf("endAt %s is %s away, want about 60s", d.EndAt, left)
	}

	r = h.do("GET", "/v2/sandboxes", "")
	if l := decode[[]listedSandbox](t, r); r.status != http.StatusOK || len(l) != 1 || l[0].SandboxID != sr.SandboxID || r.header.Get("X-Total-Running") != "1" {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	if r = h.do("DELETE", "/sandboxes/"+sr.SandboxID, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if h.f.has(sr.SandboxID) {
		t.Fatal("kill left the sandbox in the backend")
	}
	if got := strings.Join(h.api.forgot, ","); got != sr.SandboxID {
		t.Errorf("the in-sandbox API was told to forget %q, want %q", got, sr.SandboxID)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if r = h.do(m, "/sandboxes/"+sr.SandboxID, ""); r.status != http.StatusNotFound {
			t.Fatalf("%s after kill: %d %s", m, r.status, r.body)
		}
		r.errBody(t)
	}
}

func TestInSandboxRouting(t *testing.T) {
	h := newHarness(t, Options{})
	a, b := h.create(`{}`), h.create(`{}`)
	type tc struct {
		name, path, id, token string
		hdr                   []string
		status                int
	}
	for _, c := range []tc{
		{"own token", "/health", a.SandboxID, a.EnvdAccessToken, nil, http.StatusOK},
		{"other's own token", "/process.Process/Start", b.SandboxID, b.EnvdAccessToken, nil, http.StatusOK},
		{"no token", "/health", a.SandboxID, "", nil, http.StatusUnauthorized},
		{"wrong token", "/health", a.SandboxID, "x" + a.EnvdAccessToken, nil, http.StatusUnauthorized},
		{"A's token for B", "/files", b.SandboxID, a.EnvdAccessToken, nil, http.StatusUnauthorized},
		{"the API key as token", "/files", a.SandboxID, testKey, nil, http.StatusUnauthorized},
		{"a prefix of the id", "/health", a.SandboxID[:8], h.s.accessToken(a.SandboxID[:8]), nil, http.StatusBadGateway},
		{"no such sandbox", "/health", "0123456789abcdef", h.s.accessToken("0123456789abcdef"), nil, http.StatusBadGateway},
		{"another port", "/", a.SandboxID, a.EnvdAccessToken, []string{headerSandboxPort, "8080"}, http.StatusNotImplemented},
		{"no id header", "/files", "", "", nil, http.StatusBadRequest},
	} {
		hdr := append([]string{"X-API-Key", ""}, c.hdr...)
		if c.id != "" {
			hdr = append(hdr, headerSandboxID, c.id)
		}
		if c.token != "" {
			hdr = append(hdr, headerAccessToken, c.token)
		}
		r := h.do("GET", c.path, "", hdr...)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if c.status == http.StatusOK {
			if got := r.header.Get("X-Sandbox"); got != c.id {
				t.Errorf("%s: served for sandbox %q, want %q", c.name, got, c.id)
			}
		} else {
			r.errBody(t)
		}
	}
	h.api.mu.Lock()
	served := strings.Join(h.api.served, ";")
	h.api.mu.Unlock()
	if want := a.SandboxID + " /health;" + b.SandboxID + " /process.Process/Start"; served != want {
		t.Errorf("the in-sandbox API served %q, want only %q", served, want)
	}
	// A paused sandbox is not served (its processes are frozen).
	if r := h.do("POST", "/sandboxes/"+a.SandboxID+"/pause", ""); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r := h.do("GET", "/health", "", "X-API-Key", "", headerSandboxID, a.SandboxID, headerAccessToken, a.EnvdAccessToken)
	if r.status != http.StatusBadGateway || !strings.Contains(r.errBody(t).Message, "paused") {
		t.Fatalf("paused sandbox: %d %s", r.status, r.body)
	}
}

func TestLimits(t *testing.T) {
	h := newHarness(t, Options{MaxBodyBytes: 1024, MaxSandboxBodyBytes: 100, MaxStreamsPerSandbox: 1})
	big := `{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", 2000) + `"}}`
	r := h.do("POST", "/v2/sandboxes", big)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", r.status, r.body)
	}
	r.errBody(t)
	if len(h.f.calls) != 0 {
		t.Fatalf("an oversized create reached the backend: %v", h.f.calls)
	}

	sb := h.create(`{}`)
	auth := []string{"X-API-Key", "", headerSandboxID, sb.SandboxID, headerAccessToken, sb.EnvdAccessToken}
	if r = h.do("POST", "/body", strings.Repeat("x", 101), auth...); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized in-sandbox body: %d", r.status)
	}
	if r = h.do("POST", "/body", strings.Repeat("x", 100), auth...); r.status != http.StatusOK {
		t.Fatalf("in-sandbox body at the limit: %d", r.status)
	}

	// One request in flight is the sandbox's limit: a second is refused
	// until the first ends.
	done := make(chan response)
	go func() { done <- h.do("GET", "/block", "", auth...) }()
	<-h.api.entered
	if r = h.do("GET", "/health", "", auth...); r.status != http.StatusTooManyRequests {
		t.Fatalf("second request in flight: %d %s", r.status, r.body)
	}
	r.errBody(t)
	close(h.api.release)
	if r = <-done; r.status != http.StatusOK {
		t.Fatalf("blocked request: %d", r.status)
	}
	if r = h.do("GET", "/health", "", auth...); r.status != http.StatusOK {
		t.Fatalf("request after the first ended: %d %s", r.status, r.body)
	}
}

func TestMaxSandboxes(t *testing.T) {
	h := newHarness(t, Options{MaxSandboxes: 2})
	h.create(`{}`)
	sb := h.create(`{}`)
	r := h.do("POST", "/v2/sandboxes", `{}`)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("third sandbox: %d %s", r.status, r.body)
	}
	h.do("DELETE", "/sandboxes/"+sb.SandboxID, "")
	h.create(`{}`)
}

func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", sandbox.ErrNotFound), 404},
		{fmt.Errorf("x: %w", sandbox.ErrInvalidSpec), 400},
		{&sandbox.UnsupportedError{Missing: []sandbox.Missing{{Protection: "landlock", Reason: "no"}}}, 400},
		{fmt.Errorf("x: %w", sandbox.ErrUnsupported), 400},
		{sandbox.ErrAmbiguous, 400},
		{sandbox.ErrTerminated, 409},
		{sandbox.ErrStopped, 409},
		{sandbox.ErrClosed, 503},
		{context.DeadlineExceeded, 504},
		{&http.MaxBytesError{Limit: 1}, 413},
		{notImplemented("x"), 501},
		{errors.New("boom"), 500},
	} {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("statusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}

	h := newHarness(t, Options{})
	for _, c := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("%w: workdir: not absolute", sandbox.ErrInvalidSpec), 400, "workdir: not absolute"},
		{&sandbox.UnsupportedError{Missing: []sandbox.Missing{{Protection: "cgroup limits", Reason: "no delegation"}}, Degradable: true}, 400, "add best_effort: true to the template"},
		{errors.New("disk on fire"), 500, "disk on fire"},
	} {
		h.f.fail("Provision", c.err)
		r := h.do("POST", "/v2/sandboxes", `{}`)
		if r.status != c.status || !strings.Contains(r.errBody(t).Message, c.msg) {
			t.Errorf("Provision failing with %v: %d %s, want %d with %q", c.err, r.status, r.body, c.status, c.msg)
		}
	}
}

func TestNotImplemented(t *testing.T) {
	h := newHarness(t, Options{})
	for _, c := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"GET", "/templates", "", 501, "not implemented by tent serve: GET /templates"},
		{"DELETE", "/templates/base", "", 501, "deleting template base"},
		{"DELETE", "/templates/snap1", "", 404, "snapshot \"snap1\" not found"},
		{"GET", "/v2/sandboxes/x/logs", "", 501, "not implemented"},
		{"POST", "/volumes", "{}", 501, "not implemented"},
		{"POST", "/v2/sandboxes", `{"mcp":{"x":{}}}`, 501, "mcp"},
		{"POST", "/v2/sandboxes", `{"volumeMounts":[{"name":"v","path":"/v"}]}`, 501, "volumeMounts"},
		{"POST", "/v2/sandboxes", `{"network":{"denyOut":["0.0.0.0/0"],"rules":{"a.com":[{}]}}}`, 501, "network.rules"},
		{"GET", "/nonsense", "", 404, "no such endpoint"},
	} {
		r := h.do(c.method, c.path, c.body)
		if r.status != c.status || !strings.Contains(r.errBody(t).Message, c.msg) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.method, c.path, r.status, r.body, c.status, c.msg)
		}
	}
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, Options{})
	for _, c := range []struct{ body, msg string }{
		{`{"templateID":"../etc"}`, "templateID"},
		{`{"timeout":0}`, "timeout: 0 seconds"},
		{`{"timeout":90000}`, "timeout: 90000 seconds"},
		{`{"timeout":"5"}`, "timeout"},
		{`{"envVars":{"1A":"x"}}`, "not a valid variable name"},
		{`{"metadata":{"tent.template":"x"}}`, "reserved"},
		{`{"metadata":{"k":"a\u001b[2J"}}`, "control characters"},
		{`{"autoPauseMemory":false,"autoPause":true,"autoResume":{"enabled":true}}`, "resumed by connect only"},
		{`{"autoResume":{"enabled":true}}`, "autoResume needs autoPause"},
		{`{"network":{"allowOut":["example.com"]}}`, "denyOut 0.0.0.0/0"},
		{`{"network":{"denyOut":["0.0.0.0/0"],"allowOut":["*.com"]}}`, "allowOut[0]"},
		{`{"network":{"denyOut":["0.0.0.0/0","evil.com"]}}`, "denyOut[1]"},
		{`{} {}`, "unexpected data"},
		{`[`, "invalid request body"},
		{`{"templateID":"nosuch"}`, "not found"},
	} {
		r := h.do("POST", "/v2/sandboxes", c.body)
		want := http.StatusBadRequest
		if c.msg == "not found" {
			want = http.StatusNotFound
		}
		if r.status != want || !strings.Contains(r.errBody(t).Message, c.msg) {
			t.Errorf("create %s: %d %s, want %d with %q", c.body, r.status, r.body, want, c.msg)
		}
	}
	if n := len(h.f.boxes); n != 0 {
		t.Fatalf("bad requests provisioned %d sandboxes", n)
	}
}

func TestSignedURLs(t *testing.T) {
	h := newHarness(t, Options{Domain: "localhost:49982"})
	a, b := h.create(`{}`), h.create(`{}`)
	sign := func(token, path, op, user, exp string) string {
		msg := path + ":" + op + ":" + user + ":" + token
		if exp != "" {
			msg += ":" + exp
		}
		sum := sha256.Sum256([]byte(msg))
		q := url.Values{"path": {path}, "signature": {"v1_" + base64.RawStdEncoding.EncodeToString(sum[:])}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return "/files?" + q.Encode()
	}
	future := fmt.Sprint(time.Now().Add(time.Minute).Unix())
	past := fmt.Sprint(time.Now().Add(-time.Second).Unix())
	for _, c := range []struct {
		name, method, url string
		status            int
		id                string
	}{
		{"A's read", "GET", sign(b.EnvdAccessToken, "/tmp/x", "read", "", ""), 200, b.SandboxID},
		{"B's write with a user and expiry", "POST", sign(a.EnvdAccessToken, "/tmp/x", "write", "root", future), 200, a.SandboxID},
		{"expired", "GET", sign(a.EnvdAccessToken, "/tmp/x", "read", "", past), 401, ""},
		{"a read signature to write", "POST", sign(a.EnvdAccessToken, "/tmp/x", "read", "", ""), 401, ""},
		{"signed with the API key", "GET", sign(testKey, "/tmp/x", "read", "", ""), 401, ""},
		{"tampered path", "GET", strings.Replace(sign(a.EnvdAccessToken, "/tmp/x", "read", "", ""), "x", "y", 1), 401, ""},
	} {
		r := h.do(c.method, c.url, "", "X-API-Key", "")
		if r.status != c.status || r.header.Get("X-Sandbox") != c.id {
			t.Errorf("%s: status %d for sandbox %q, want %d for %q: %s", c.name, r.status, r.header.Get("X-Sandbox"), c.status, c.id, r.body)
		}
		if c.name == "expired" && r.errBody(t).Message != "signature is already expired" {
			t.Errorf("expired: %s, want envd's message, which callers match", r.body)
		}
	}
	// The SDKs built with E2B_DOMAIN sign URLs on the sandbox's own host
	// name (49983-ID.domain), or send E2b-Sandbox-Id: the signature stands
	// in for the access token there too, checked against that sandbox's
	// token alone.
	aHost := "49983-" + a.SandboxID + ".localhost:49982"
	for _, c := range []struct {
		name, method, host, url string
		hdr                     []string
		status                  int
		id, msg                 string
	}{
		{"A's read on A's host", "GET", aHost, sign(a.EnvdAccessToken, "/tmp/x", "read", "", ""), nil, 200, a.SandboxID, ""},
		{"A's write on A's host", "POST", aHost, sign(a.EnvdAccessToken, "/tmp/x", "write", "", future), nil, 200, a.SandboxID, ""},
		{"B's read on A's host", "GET", aHost, sign(b.EnvdAccessToken, "/tmp/x", "read", "", ""), nil, 401, "", "invalid signature"},
		{"expired on A's host", "GET", aHost, sign(a.EnvdAccessToken, "/tmp/x", "read", "", past), nil, 401, "", "signature is already expired"},
		{"A's read with E2b-Sandbox-Id A", "GET", "", sign(a.EnvdAccessToken, "/tmp/x", "read", "", ""), []string{headerSandboxID, a.SandboxID}, 200, a.SandboxID, ""},
		{"B's read with E2b-Sandbox-Id A", "GET", "", sign(b.EnvdAccessToken, "/tmp/x", "read", "", ""), []string{headerSandboxID, a.SandboxID}, 401, "", "invalid signature"},
		{"a bad signature with A's access token", "GET", aHost, sign(b.EnvdAccessToken, "/tmp/x", "read", "", ""), []string{headerAccessToken, a.EnvdAccessToken}, 200, a.SandboxID, ""},
	} {
		r := hostRequest(t, c.method, h.url+c.url, c.host, c.hdr...)
		if r.status != c.status || r.header.Get("X-Sandbox") != c.id {
			t.Errorf("%s: status %d for sandbox %q, want %d for %q: %s", c.name, r.status, r.header.Get("X-Sandbox"), c.status, c.id, r.body)
		}
		if c.msg != "" && !strings.Contains(r.errBody(t).Message, c.msg) {
			t.Errorf("%s: %s, want %q", c.name, r.body, c.msg)
		}
	}
}
