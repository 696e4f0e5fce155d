package serve

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// FuzzCreateRequest feeds arbitrary bodies through what a create does
// before touching the backend: decoding, validation and the network
// mapping. It must never panic; a refusal must be a 4xx or a 501 with a
// message; an accepted request must be within every bound.
func FuzzCreateRequest(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`{"templateID":"base","timeout":300,"metadata":{"a":"b"},"envVars":{"K":"v"}}`,
		`{"templateID":"x","allow_internet_access":false,"network":{"allowOut":["example.com","10.0.0.1"],"denyOut":["0.0.0.0/0"]}}`,
		`{"autoPause":true,"autoResume":{"enabled":true},"autoPauseMemory":true}`,
		`{"network":{"denyOut":["::/0"],"allowOut":["*.example.com:443","[2001:db8::1]:443"]}}`,
		`{"mcp":{},"iam":{"tokens":{}}}`,
		`{"timeout":-1}`,
		`{"envVars":{"":"x"}}`,
		`{"metadata":{"tent.x":"y"}}`,
		`null`,
		`[]`,
		`{"timeout":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	s, err := New(newFake(), Options{APIKey: "k", SandboxAPI: &fakeAPI{}})
	if err != nil {
		f.Fatal(err)
	}
	caps := sandbox.Capabilities{Suspend: true, NetworkPolicy: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req newSandboxRequest
		err := decodeJSON(body, &req)
		var plan createPlan
		if err == nil {
			plan, err = s.planCreate(req, caps)
		}
		var p sandbox.NetworkPolicy
		if err == nil {
			p, err = networkPolicy(sandbox.NetworkPolicy{}, plan.allowInternet, plan.network, false, true)
			if err != nil && !strings.Contains(err.Error(), "open internet") {
				t.Fatalf("planCreate accepted what the mapping refuses: %v", err)
			}
			if err == nil {
				if verr := p.Validate(); verr != nil {
					t.Fatalf("mapped an invalid network policy %+v: %v", p, verr)
				}
			}
			err = nil
		}
		if err != nil {
			st := statusOf(err)
			if st != http.StatusBadRequest && st != http.StatusNotImplemented && st != http.StatusRequestEntityTooLarge {
				t.Fatalf("refused with status %d: %v", st, err)
			}
			if err.Error() == "" {
				t.Fatal("refused without a message")
			}
			return
		}
		if !policy.ValidName(plan.template) {
			t.Fatalf("accepted template %q", plan.template)
		}
		if plan.timeout < 1e9 || plan.timeout > s.opts.MaxTimeout {
			t.Fatalf("accepted timeout %s", plan.timeout)
		}
		if len(plan.env) > maxEnvVars || len(plan.metadata) > maxMetadata {
			t.Fatalf("accepted %d env vars and %d metadata entries", len(plan.env), len(plan.metadata))
		}
		for _, kv := range plan.env {
			k, v, _ := strings.Cut(kv, "=")
			if !policy.ValidEnvName(k) || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("accepted env entry %q", kv)
			}
		}
		for k, v := range plan.labels() {
			if k != labelTemplate && strings.HasPrefix(k, labelPrefix) || !printable(k) || !printable(v) {
				t.Fatalf("accepted label %q=%q", k, v)
			}
		}
		if p.Mode.Normalize() == netpolicy.Host {
			t.Fatal("a request made a sandbox share the host's network")
		}
	})
}
