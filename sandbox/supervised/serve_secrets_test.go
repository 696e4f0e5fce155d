//go:build linux

package supervised

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
	e2bserve "github.com/tent-sandbox/tent/serve"
)

// Through tent serve's E2B API over this backend: a sandbox whose
// network rule sets a header from ${e2b.secrets.gh} sends, on its next
// request to the origin, the value the API last gave the secret: after a
// rotation, in a fork, and after a files-only pause and resume; a
// destroy revokes it everywhere. The value is in no file of the state
// directory but the store (0600), and in no process's command line or
// environment.
func TestServeSecretRotationReachesForkAndResumed(t *testing.T) {
	o := newAuthOrigin(t)
	// The base template's sandboxes see the host's /usr: the request
	// inside is curl's, as an E2B user's would be.
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("TENT_REQUIRE_SDK") == "1" { // CI's host, where scripts/setup installs it
			t.Fatal("curl is not installed, and TENT_REQUIRE_SDK=1 asks for this test to run")
		}
		t.Skip("curl is not installed (the sandboxes of the base template run the host's)")
	}
	b := open(t)
	srv, err := e2bserve.New(b, e2bserve.Options{APIKey: "e2b_test_key",
		StateFile:   filepath.Join(b.Dir(), "serve-state.json"),
		SecretsFile: filepath.Join(b.Dir(), "serve-secrets.json"), Secrets: b.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); _ = srv.Close(context.Background(), false) })
	api := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", "e2b_test_key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
		}
		return out
	}
	var values []string
	put := func(method, path, body string, want int) string {
		v := randomValue(t)
		values = append(values, v)
		api(method, path, fmt.Sprintf(body, v), want)
		return v
	}
	v := put("POST", "/secrets", `{"name":"gh","value":"%s"}`, http.StatusCreated)
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	body := fmt.Sprintf(`{"templateID":"base","timeout":300,"network":{"allowOut":["api.example.com:%s","127.0.0.1"],"denyOut":["0.0.0.0/0"],
		"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.gh}"}}}]}}}`, o.port)
	if err := json.Unmarshal(api("POST", "/v2/sandboxes", body, http.StatusCreated), &created); err != nil {
		t.Fatal(err)
	}
	id := created.SandboxID
	check := func(id, path, want string) {
		t.Helper()
		out, res := execOut(t, b, id, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "https://api.example.com:"+o.port+path)
		if res.ExitCode != 0 || out != "200" {
			t.Fatalf("%s %s: curl %q, exit %d", id, path, out, res.ExitCode)
		}
		if got := o.got(path); got != want {
			t.Errorf("%s: the origin received %q, want %q", path, got, want)
		}
	}
	check(id, "/running", "Bearer "+v)
	v = put("POST", "/secrets/gh", `{"value":"%s"}`, http.StatusOK)
	check(id, "/running-rotated", "Bearer "+v)

	var forks []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(api("POST", "/sandboxes/"+id+"/fork", `{}`, http.StatusCreated), &forks); err != nil || len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork: %v %+v", err, forks)
	}
	fork := forks[0].Sandbox.SandboxID
	check(fork, "/fork", "Bearer "+v)
	v = put("POST", "/secrets/gh", `{"value":"%s"}`, http.StatusOK)
	check(fork, "/fork-rotated", "Bearer "+v)

	api("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, http.StatusNoContent)
	if info, err := infoOf(context.Background(), b, id); err != nil || info.State != sandbox.StateStopped {
		t.Fatalf("after the files-only pause: %v %v", info.State, err)
	}
	v = put("POST", "/secrets/gh", `{"value":"%s"}`, http.StatusOK)
	api("POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":300}`, http.StatusCreated)
	check(id, "/resumed", "Bearer "+v)
	v = put("POST", "/secrets/gh", `{"value":"%s"}`, http.StatusOK)
	check(id, "/resumed-rotated", "Bearer "+v)
	check(fork, "/fork-again", "Bearer "+v)

	api("DELETE", "/secrets/gh", "", http.StatusNoContent)
	check(id, "/revoked", "")
	check(fork, "/fork-revoked", "")

	noValueHeld(t, b, values)
	if fi, err := os.Lstat(b.Secrets().Path()); err != nil || fi.Mode() != 0o600 {
		t.Errorf("the store: %v %v, want a file of mode 0600", fi, err)
	}
}
