package serve

import (
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
)

// pythonCreateBody is the body E2B's Python SDK (packages/python-sdk,
// e2b/sandbox_sync/main.py: Sandbox.create() with no arguments) sends
// to POST /sandboxes: NewSandbox.to_dict() of template "base", the
// default timeout of 300 s, secure and allow_internet_access true and
// empty metadata and envs, serialized compactly by httpx.
const pythonCreateBody = `{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true,"metadata":{},"envVars":{}}`

// TestPythonSDKDefaultCreate replays the Python SDK's default create:
// it succeeds, the template decides the network (base: none; a template
// with net: host or limited gets its own), and both the answer and
// getInfo say what the sandbox got, not E2B's defaults.
func TestPythonSDKDefaultCreate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "open.yaml"), "net: host\n")
	writeFile(t, filepath.Join(dir, "pypi.yaml"), "net: limited\nallowed_hosts: [pypi.org]\n")
	h := newHarness(t, Options{TemplatesDir: dir})
	for _, c := range []struct {
		template string
		mode     netpolicy.Mode
		internet bool
		allowOut []string
		denyAll  bool
	}{
		{"base", netpolicy.None, false, nil, true},
		{"open", netpolicy.Host, true, nil, false},
		{"pypi", netpolicy.Limited, false, []string{"pypi.org"}, true},
	} {
		body := pythonCreateBody
		if c.template != "base" {
			body = `{"templateID":"` + c.template + `","timeout":300,"secure":true,"allow_internet_access":true,"metadata":{},"envVars":{}}`
		}
		r := h.do("POST", "/sandboxes", body, "Content-Type", "application/json", "X-API-Key", testKey)
		if r.status != http.StatusCreated {
			t.Fatalf("%s: the Python SDK's default create: %d %s", c.template, r.status, r.body)
		}
		created := decode[sandboxResponse](t, r)
		// The SDKs refuse watchDir({allowNetworkMounts}) below 0.6.4.
		if created.EnvdVersion != "0.6.4" || created.EnvdAccessToken == "" || created.ClientID == "" {
			t.Errorf("%s: the answer lacks a field the Python SDK reads: %s", c.template, r.body)
		}
		got := h.f.boxes[created.SandboxID].Spec.Network
		if got.Mode.Normalize() != c.mode || !slices.Equal(got.AllowedHosts, c.allowOut) {
			t.Errorf("%s: the sandbox got network %s %v, want the template's %s %v", c.template, got.Mode, got.AllowedHosts, c.mode, c.allowOut)
		}
		info := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+created.SandboxID, ""))
		for what, v := range map[string]struct {
			internet *bool
			net      *networkConfig
		}{"the answer": {created.AllowInternetAccess, created.Network}, "getInfo": {info.AllowInternetAccess, info.Network}} {
			if v.internet == nil || *v.internet != c.internet {
				t.Errorf("%s: %s says allowInternetAccess %v, want %v", c.template, what, v.internet, c.internet)
			}
			denyAll := v.net != nil && slices.Contains(v.net.DenyOut, "0.0.0.0/0")
			if denyAll != c.denyAll || v.net != nil && !slices.Equal(v.net.AllowOut, c.allowOut) {
				t.Errorf("%s: %s says network %+v, want allowOut %v, deny all %v", c.template, what, v.net, c.allowOut, c.denyAll)
			}
		}
	}
	// Settings that choose keep their strict meaning.
	if r := h.do("POST", "/sandboxes", `{"templateID":"base","allow_internet_access":true,"network":{"allowOut":["example.com"]}}`); r.status != http.StatusBadRequest {
		t.Errorf("allowOut without denying the rest: %d %s, want 400", r.status, r.body)
	}
}
