package serve

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// E2B's network model and tent's differ, and the mapping refuses what
// tent cannot enforce rather than enforcing something else:
//
//   - E2B: the internet is open unless allow_internet_access is false or
//     denyOut lists it; allowOut entries win over denyOut ones.
//   - tent: limited mode reaches only what its allow rules list, through
//     a host-side proxy (deny rules win); none has no network; host is
//     the host's network.
//
// So a sandbox whose E2B settings deny everything but allowOut
// (allow_internet_access: false, or denyOut containing 0.0.0.0/0, the
// SDKs' ALL_TRAFFIC) runs in limited mode allowing exactly allowOut: the
// same set of destinations. Its other denyOut entries are already denied
// (and E2B lets allowOut win over them), so they add no rule. Settings
// that leave the rest of the internet open are refused, except on a
// template with net: host and no rules. A create that chooses nothing
// (no rules; allow_internet_access absent or true, E2B's default, which
// the Python SDK always sends) gets its template's network. Private destinations (loopback,
// RFC 1918, cloud metadata...) are reachable only when an IP or CIDR
// allowOut entry names them, as in tent's limited mode everywhere.

// allTraffic are the denyOut entries meaning "everything".
var allTraffic = []string{"0.0.0.0/0", "::/0"}

// maxNetRules bounds allowOut and denyOut.
const maxNetRules = 256

// openInternetHelp says how to express an E2B network tent enforces.
const openInternetHelp = `tent cannot give a sandbox the open internet except through a template with "net: host": list the destinations in network.allowOut and add denyOut: ["0.0.0.0/0"] (ALL_TRAFFIC in the SDKs), or set allow_internet_access to false`

// networkPolicy maps E2B's network settings onto a tent policy. base is
// the template's policy, kept when the request sets nothing; update
// means a PUT .../network, where settings left out are cleared (back to
// E2B's open internet) rather than kept. limitedOK says whether the
// backend can run limited mode; without it, a sandbox denied everything
// gets mode none instead.
func networkPolicy(base sandbox.NetworkPolicy, allowInternet *bool, nc *networkConfig, update, limitedOK bool) (sandbox.NetworkPolicy, error) {
	if nc == nil {
		nc = &networkConfig{}
	}
	if allowInternet == nil {
		allowInternet = nc.AllowInternetAccess
	}
	if err := checkUnsupportedNet(nc); err != nil {
		return sandbox.NetworkPolicy{}, err
	}
	secrets, err := ruleSecrets(nc.Rules)
	if err != nil {
		return sandbox.NetworkPolicy{}, err
	}
	if len(secrets) > 0 {
		p, err := networkPolicy(base, allowInternet, &networkConfig{AllowOut: nc.AllowOut, DenyOut: nc.DenyOut, AllowInternetAccess: nc.AllowInternetAccess}, update, limitedOK)
		if err != nil {
			return p, err
		}
		if p.Mode.Normalize() != policy.NetLimited {
			return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network.rules: header transforms are made by tent's proxy, which only a limited sandbox has: list the hosts in network.allowOut with denyOut: [\"0.0.0.0/0\"] (ALL_TRAFFIC)")
		}
		p.Secrets = append(slices.Clip(p.Secrets), secrets...)
		return p, nil
	}
	if len(nc.AllowOut) > maxNetRules || len(nc.DenyOut) > maxNetRules {
		return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network: at most %d allowOut and %d denyOut entries", maxNetRules, maxNetRules)
	}
	denyAll := allowInternet != nil && !*allowInternet
	for i, d := range nc.DenyOut {
		d = strings.TrimSpace(d)
		if slices.Contains(allTraffic, d) {
			denyAll = true
			continue
		}
		if err := checkDenyEntry(d); err != nil {
			return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network.denyOut[%d] %q: %v", i, nc.DenyOut[i], err)
		}
	}
	allowed := make([]string, 0, len(nc.AllowOut))
	for i, a := range nc.AllowOut {
		a = strings.TrimSpace(a)
		if slices.Contains(allTraffic, a) {
			return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network.allowOut[%d] %q: %s", i, nc.AllowOut[i], openInternetHelp)
		}
		if _, err := policy.ParseRule(a); err != nil {
			return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network.allowOut[%d]: %v", i, err)
		}
		allowed = append(allowed, a)
	}
	if denyAll {
		if !limitedOK {
			if len(allowed) > 0 {
				return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network.allowOut: this host cannot run tent's limited network mode (its proxy), which allow rules need")
			}
			return sandbox.NetworkPolicy{Mode: policy.NetNone}, nil
		}
		return sandbox.NetworkPolicy{Mode: policy.NetLimited, AllowedHosts: allowed}, nil
	}
	if len(nc.AllowOut)+len(nc.DenyOut) > 0 {
		return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network: without denyOut 0.0.0.0/0 or allow_internet_access false, E2B leaves every destination not in denyOut open: %s", openInternetHelp)
	}
	if !update && (allowInternet == nil || *allowInternet) {
		// E2B's defaults (the Python SDK always sends
		// allow_internet_access: true): the template decides.
		return base, nil
	}
	if base.Mode.Normalize() == policy.NetHost {
		return base, nil // the open internet, as asked
	}
	if allowInternet != nil {
		return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "allow_internet_access: true: %s", openInternetHelp)
	}
	return sandbox.NetworkPolicy{}, errorf(http.StatusBadRequest, "network update without rules means E2B's open internet: %s", openInternetHelp)
}

// decidesNetwork reports whether a create's network settings choose the
// sandbox's network (deny everything, or rules) rather than leave it to
// the template: allow_internet_access true without rules is E2B's
// default, which the Python SDK always sends, and leaves it to the
// template.
func decidesNetwork(allowInternet *bool, nc *networkConfig) bool {
	if nc != nil {
		if allowInternet == nil {
			allowInternet = nc.AllowInternetAccess
		}
		if len(nc.AllowOut)+len(nc.DenyOut) > 0 || nc.EgressProxy != nil || len(nc.Rules) > 0 {
			return true
		}
	}
	return allowInternet != nil && !*allowInternet
}

// checkDenyEntry checks a denyOut entry: E2B takes IP addresses and CIDR
// prefixes there, never names.
func checkDenyEntry(d string) error {
	if _, err := netip.ParsePrefix(d); err == nil {
		return nil
	}
	if _, err := netip.ParseAddr(d); err == nil {
		return nil
	}
	return fmt.Errorf("not an IP address or CIDR prefix (E2B takes no host names in denyOut)")
}

// checkUnsupportedNet refuses E2B egress features tent does not have.
// Of the settings that concern traffic into the sandbox's ports,
// allowPublicTraffic and maskRequestHost are served (see ports.go);
// httpsPorts is accepted and has no effect (the server forwards plain
// HTTP to every port).
func checkUnsupportedNet(nc *networkConfig) error {
	switch {
	case nc.EgressProxy != nil:
		return notImplemented("network.egressProxy (tent's limited mode has its own proxy)")
	}
	return nil
}

// maxRuleHeaders bounds the header transforms of one sandbox.
const maxRuleHeaders = 32

// ruleSecrets turns network.rules' header transforms into secrets of the
// sandbox's policy (policy.NetworkSecret with Header): tent's proxy sets each
// header on every HTTPS request to its host, which it intercepts for
// that, and the value never enters the sandbox, its records or answers
// (see redactRules). A value naming ${e2b.secrets.NAME} becomes a
// Template the proxy fills from the secret store per request (see
// ruleTemplate); another is given as it is. A rule of another kind is
// not implemented (501).
func ruleSecrets(rules map[string][]networkRule) ([]policy.NetworkSecret, error) {
	hosts := make([]string, 0, len(rules))
	for h := range rules {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	var out []policy.NetworkSecret
	for _, h := range hosts {
		r, err := policy.ParseRule(h)
		if err != nil || r.IsAddr() {
			return nil, errorf(http.StatusBadRequest, "network.rules[%q]: want a host name (header transforms need TLS to a named host)", h)
		}
		for i, rule := range rules[h] {
			if rule.Transform == nil || len(rule.Transform.Headers) == 0 {
				return nil, notImplemented(fmt.Sprintf("network.rules[%q][%d]: rules other than transform.headers", h, i))
			}
			names := make([]string, 0, len(rule.Transform.Headers))
			for k := range rule.Transform.Headers {
				names = append(names, k)
			}
			slices.Sort(names)
			for _, k := range names {
				sec := policy.NetworkSecret{Name: fmt.Sprintf("E2B_RULE_%d", len(out)+1), Hosts: []string{h}, Header: k, Value: rule.Transform.Headers[k]}
				tmpl, ok, err := ruleTemplate(sec.Value)
				if err != nil {
					return nil, errorf(http.StatusBadRequest, "network.rules[%q][%d].transform.headers[%q]: %v", h, i, k, err)
				}
				if ok {
					// Named, not carried: the proxy fills it per request.
					sec.Value, sec.Template = "", tmpl
				}
				out = append(out, sec)
			}
		}
	}
	if len(out) > maxRuleHeaders {
		return nil, errorf(http.StatusBadRequest, "network.rules: at most %d header transforms", maxRuleHeaders)
	}
	if len(out) > 0 {
		// The proxy's own checks, with the field each refusal names.
		if err := policy.CheckNetwork(sandbox.NetworkPolicy{Mode: policy.NetLimited, Secrets: out}); err != nil {
			return nil, errorf(http.StatusBadRequest, "network.rules: %v", err)
		}
	}
	return out, nil
}

// redactRules is nc with its header transforms' values replaced: what
// the server keeps, saves and answers.
func redactRules(nc *networkConfig) *networkConfig {
	if nc == nil || len(nc.Rules) == 0 {
		return nc
	}
	c := *nc
	c.Rules = make(map[string][]networkRule, len(nc.Rules))
	for h, rs := range nc.Rules {
		for _, r := range rs {
			if r.Transform != nil {
				hs := make(map[string]string, len(r.Transform.Headers))
				for k := range r.Transform.Headers {
					hs[k] = redacted
				}
				r = networkRule{Transform: &ruleTransform{Headers: hs}}
			}
			c.Rules[h] = append(c.Rules[h], r)
		}
	}
	return &c
}

// redacted stands for a header transform's value in what the server
// keeps and answers.
const redacted = "[redacted]"

// internetView is what getInfo reports as allowInternetAccess: the
// setting given when the server keeps one, else whether the sandbox's
// policy is the open internet (net: host).
func internetView(p sandbox.NetworkPolicy, given *bool) *bool {
	if given != nil {
		return given
	}
	open := p.Mode.Normalize() == policy.NetHost
	return &open
}

// networkView is what getInfo reports of a sandbox's network: the
// settings it was given when the server knows them, else its tent policy
// in E2B's terms.
func networkView(p sandbox.NetworkPolicy, given *networkConfig) *networkConfig {
	if given != nil {
		return given
	}
	switch p.Mode.Normalize() {
	case policy.NetHost:
		return nil
	case policy.NetLimited:
		return &networkConfig{AllowOut: p.AllowedHosts, DenyOut: []string{allTraffic[0]}}
	}
	return &networkConfig{DenyOut: []string{allTraffic[0]}}
}

// handleNetwork serves PUT /sandboxes/{sandboxID}/network: the
// sandbox's allow rules are replaced (see networkPolicy for the mapping).
func (s *Server) handleNetwork(w http.ResponseWriter, r *http.Request) {
	var req networkConfig
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.netMu.Lock()
	defer s.netMu.Unlock()
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.checkRuleSecrets(&req); err != nil {
		s.writeError(w, r, err)
		return
	}
	cur := info.Spec.Network
	p, err := networkPolicy(cur, nil, &req, true, s.b.Capabilities().NetworkPolicy)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch cur.Mode.Normalize() {
	case p.Mode.Normalize():
	case policy.NetNone:
		if len(p.AllowedHosts) > 0 || len(p.Secrets) > 0 {
			s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s was created without network rules (no network at all), and tent picks the network mode at creation: create it with network rules (for example denyOut: [\"0.0.0.0/0\"]) to change them at run time", info.ID))
			return
		}
		// It has no network: denying everything changes nothing.
	default:
		s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s runs with network mode %s, which cannot become %s at run time", info.ID, cur.Mode.Normalize(), p.Mode.Normalize()))
		return
	}
	if cur.Mode.Normalize() == policy.NetLimited {
		// On a context of its own: a client gone must not leave the
		// change half made.
		ctx, cancel := s.detached(r)
		defer cancel()
		if err := handle.Open(ctx, s.b, info.ID).SetNetworkPolicy(ctx, p); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.mu.Lock()
	b := s.boxLocked(info.ID)
	b.allowInternet, b.network = req.AllowInternetAccess, redactRules(&req)
	s.markDirtyLocked()
	s.mu.Unlock()
	s.log.Info("sandbox network rules replaced", "id", info.ID, "allowed", p.AllowedHosts)
	w.WriteHeader(http.StatusNoContent)
}
