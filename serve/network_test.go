package serve

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

func TestNetworkPolicyMapping(t *testing.T) {
	yes, no := true, false
	none := sandbox.NetworkPolicy{}
	host := sandbox.NetworkPolicy{Mode: netpolicy.Host}
	tmplLimited := sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"proxy.golang.org"}}
	for _, c := range []struct {
		name      string
		base      sandbox.NetworkPolicy
		allow     *bool
		nc        *networkConfig
		update    bool
		limitedOK bool
		want      string // the policy, or "error: substring"
	}{
		{"nothing: the template's", tmplLimited, nil, nil, false, true, "limited [proxy.golang.org]"},
		{"nothing on base", none, nil, nil, false, true, "none []"},
		{"deny all", none, &no, nil, false, true, "limited []"},
		{"deny all without a proxy", none, &no, nil, false, false, "none []"},
		{"ALL_TRAFFIC and allowOut", none, nil, &networkConfig{AllowOut: []string{"example.com", "10.0.0.0/8:5432"}, DenyOut: []string{"0.0.0.0/0"}}, false, true, "limited [example.com 10.0.0.0/8:5432]"},
		{"::/0 denies all too", none, nil, &networkConfig{DenyOut: []string{"::/0"}}, false, true, "limited []"},
		{"other denyOut entries add nothing", none, &no, &networkConfig{DenyOut: []string{"10.0.0.0/8", "1.2.3.4"}, AllowOut: []string{"10.1.2.3"}}, false, true, "limited [10.1.2.3]"},
		{"allowOut needs a proxy", none, &no, &networkConfig{AllowOut: []string{"a.example"}}, false, false, "error: limited network mode"},
		{"allowOut alone leaves the internet open", none, nil, &networkConfig{AllowOut: []string{"example.com"}}, false, true, "error: denyOut 0.0.0.0/0"},
		{"denyOut alone leaves the internet open", none, nil, &networkConfig{DenyOut: []string{"8.8.8.8"}}, false, true, "error: denyOut 0.0.0.0/0"},
		{"internet on a host template", host, &yes, nil, false, true, "host []"},
		{"E2B's default on a limited template: the template's", tmplLimited, &yes, nil, false, true, "limited [proxy.golang.org]"},
		{"E2B's default on base: none", none, &yes, nil, false, true, "none []"},
		{"internet asked for at run time", tmplLimited, &yes, nil, true, true, "error: open internet"},
		{"update clearing everything", tmplLimited, nil, &networkConfig{}, true, true, "error: open internet"},
		{"update clearing on host", host, nil, &networkConfig{}, true, true, "host []"},
		{"allow_internet_access in the update body", none, nil, &networkConfig{AllowInternetAccess: &no, AllowOut: []string{"1.1.1.1"}}, true, true, "limited [1.1.1.1]"},
		{"allowOut everything", none, &no, &networkConfig{AllowOut: []string{"0.0.0.0/0"}}, false, true, "error: allowOut[0]"},
		{"bad allow rule", none, &no, &networkConfig{AllowOut: []string{"*.co.uk"}}, false, true, "error: allowOut[0]"},
		{"name in denyOut", none, &no, &networkConfig{DenyOut: []string{"evil.example"}}, false, true, "error: denyOut[0]"},
		{"egress proxy", none, &no, &networkConfig{EgressProxy: map[string]any{"address": "p:1080"}}, false, true, "error: egressProxy"},
		{"inbound-only settings are accepted", none, &no, &networkConfig{AllowPublicTraffic: &no, HTTPSPorts: []int{443}}, false, true, "limited []"},
	} {
		p, err := networkPolicy(c.base, c.allow, c.nc, c.update, c.limitedOK)
		got := fmt.Sprintf("%s %v", p.Mode.Normalize(), p.AllowedHosts)
		if len(p.AllowedHosts) == 0 {
			got = string(p.Mode.Normalize()) + " []"
		}
		if err != nil {
			got = "error: " + err.Error()
		}
		if want, ok := strings.CutPrefix(c.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: got %q, want an error with %q", c.name, got, want)
			} else if st := statusOf(err); st != http.StatusBadRequest && st != http.StatusNotImplemented {
				t.Errorf("%s: status %d", c.name, st)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
		if err == nil && len(p.DeniedHosts) != 0 {
			t.Errorf("%s: denied hosts %v: E2B's allowOut wins over denyOut, so none may be set", c.name, p.DeniedHosts)
		}
		if err == nil {
			if verr := p.Validate(); verr != nil {
				t.Errorf("%s: the policy is invalid: %v", c.name, verr)
			}
		}
	}
}

// TestNetworkRulesHeaderTransforms: E2B's network.rules header transforms
// become header secrets of the sandbox's limited policy (tent's proxy
// sets them on the host's HTTPS requests); their values are in no answer
// and not in the state file; what tent cannot do is refused with 400
// naming the field.
func TestNetworkRulesHeaderTransforms(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	h := newHarness(t, Options{StateFile: state})
	const value = "e2b-transform-value-123"
	body := `{"templateID":"base","network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],
		"rules":{"api.example.com":[{"transform":{"headers":{"X-Test-Token":"` + value + `"}}}]}}}`
	r := h.do("POST", "/v2/sandboxes", body)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), value) || !strings.Contains(string(r.body), redacted) {
		t.Fatalf("create with a header transform: %d %s", r.status, r.body)
	}
	id := decode[sandboxResponse](t, r).SandboxID
	info, err := h.f.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	p := info.Spec.Network
	if p.Mode != "limited" || len(p.Secrets) != 1 || p.Secrets[0].Header != "X-Test-Token" || p.Secrets[0].Value != value ||
		len(p.Secrets[0].Hosts) != 1 || p.Secrets[0].Hosts[0] != "api.example.com" {
		t.Errorf("the sandbox's policy: %+v", p)
	}
	if r := h.do("GET", "/sandboxes/"+id, ""); r.status != http.StatusOK || strings.Contains(string(r.body), value) {
		t.Errorf("getInfo: %d %s", r.status, r.body)
	}
	h.s.save()
	if b, err := os.ReadFile(state); err != nil || strings.Contains(string(b), value) || !strings.Contains(string(b), "X-Test-Token") {
		t.Errorf("the state file: %v\n%s", err, b)
	}
	for _, c := range []struct{ body, want string }{
		{`{"network":{"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"` + value + `"}}}]}}}`, "only a limited sandbox"},
		{`{"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"Host":"` + value + `"}}}]}}}`, "header"},
		{`{"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"10.0.0.1":[{"transform":{"headers":{"X-A":"` + value + `"}}}]}}}`, "host name"},
		{`{"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"short"}}}]}}}`, "shorter"},
	} {
		if r := h.do("POST", "/v2/sandboxes", c.body); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.body, r.status, r.body, c.want)
		}
	}
	// An update's rules replace the header transforms (E2B's
	// updateNetwork), kept out of answers and the state file alike; an
	// update without rules removes them.
	const other = "e2b-update-value-456"
	if r := h.do("PUT", "/sandboxes/"+id+"/network", `{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"`+other+`"}}}]}}`); r.status != http.StatusNoContent {
		t.Fatalf("rules in an update: %d %s", r.status, r.body)
	}
	if info, _ := h.f.Get(context.Background(), id); len(info.Spec.Network.Secrets) != 1 || info.Spec.Network.Secrets[0].Header != "X-A" || info.Spec.Network.Secrets[0].Value != other {
		t.Errorf("the policy after an update with rules: %+v", info.Spec.Network)
	}
	if r := h.do("GET", "/sandboxes/"+id, ""); strings.Contains(string(r.body), other) || !strings.Contains(string(r.body), `"X-A":"`+redacted+`"`) {
		t.Errorf("getInfo after an update with rules: %s", r.body)
	}
	h.s.save()
	if b, _ := os.ReadFile(state); strings.Contains(string(b), other) {
		t.Errorf("the state file holds an update's value")
	}
	if r := h.do("PUT", "/sandboxes/"+id+"/network", `{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"]}`); r.status != http.StatusNoContent {
		t.Fatalf("an update without rules: %d %s", r.status, r.body)
	}
	if info, _ := h.f.Get(context.Background(), id); len(info.Spec.Network.Secrets) != 0 {
		t.Errorf("the policy after an update without rules: %+v", info.Spec.Network)
	}
	// A sandbox whose timeout pauses it keeping only its files takes
	// rules like any other (its resume names the same secrets).
	filesOnly := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"]}}`)).SandboxID
	if r := h.do("PUT", "/sandboxes/"+filesOnly+"/network", `{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"`+other+`"}}}]}}`); r.status != http.StatusNoContent {
		t.Errorf("rules for a sandbox paused without memory: %d %s", r.status, r.body)
	}
	none := decode[sandboxResponse](t, h.do("POST", "/v2/sandboxes", `{"templateID":"base"}`)).SandboxID
	if r := h.do("PUT", "/sandboxes/"+none+"/network", `{"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"`+other+`"}}}]}}`); r.status != http.StatusConflict {
		t.Errorf("rules for a sandbox without network: %d %s, want 409", r.status, r.body)
	}
}
