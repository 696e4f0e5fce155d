package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Reasons a [Decision] carries. They are stable strings: the proxy's
// X-Tent-Denied header, the audit log and [Summary] use them verbatim.
const (
	ReasonAllowed     = "allowed by rule"  // an allow rule matched
	ReasonPublic      = "public address"   // CheckAddr: not a private address
	ReasonHostNetwork = "host network"     // mode host: everything is reachable
	ReasonNotAllowed  = "not allowed"      // no allow rule matched
	ReasonDenied      = "denied by rule"   // a deny rule matched
	ReasonPrivate     = "private address"  // loopback, private, link-local, metadata...
	ReasonInvalidHost = "invalid host"     // not a host name nor an IP address
	ReasonBadPort     = "bad port"         // not in 1-65535
	ReasonNetworkOff  = "network disabled" // mode none, or no policy at all
)

// Policy is a sandbox's network policy as plain data. The zero value is
// mode [None]: no network. In JSON:
//
//	{"mode":"limited","allowed_hosts":["example.com"],"denied_hosts":["*.evil.example"]}
//
// AllowedHosts and DeniedHosts hold patterns in the syntax of [ParseRule]
// and apply only in mode [Limited], where a deny rule always wins over an
// allow rule and a limited policy without allowed hosts reaches nothing.
//
// An allowed host may also be an HTTP rule naming methods and a path
// prefix ("GET,HEAD api.github.com/repos/org/", see [ParseHTTPRule]), and
// Secrets bind credentials to hosts (see [Secret]). Both make the proxy
// terminate TLS for the hosts they name (see "Interception" in the
// package documentation).
type Policy struct {
	Mode         Mode     `json:"mode"`
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	DeniedHosts  []string `json:"denied_hosts,omitempty"`
	Secrets      []Secret `json:"secrets,omitempty"`
}

// Validate checks the mode and parses every pattern. Host patterns with
// mode none or host are an error (they would silently do nothing). All
// problems are reported at once, joined.
func (p Policy) Validate() error {
	_, err := Compile(p)
	return err
}

// Compiled is an immutable, validated policy ready for matching. It is
// safe for concurrent use. A nil *Compiled denies everything.
type Compiled struct {
	policy    Policy
	allow     []compiledRule
	deny      []compiledRule
	httpRules []compiledHTTPRule
	secrets   []compiledSecret
}

type compiledHTTPRule struct {
	HTTPRule
	text string
}

type compiledRule struct {
	Rule
	text string // Rule.String(), computed once
}

// Compile validates p and prepares it for matching.
func Compile(p Policy) (*Compiled, error) {
	mode := p.Mode.Normalize()
	switch mode {
	case None, Host:
		if len(p.AllowedHosts)+len(p.DeniedHosts) > 0 {
			return nil, fmt.Errorf("net mode %s takes no host rules: allowed and denied hosts need mode limited", mode)
		}
		if len(p.Secrets) > 0 {
			return nil, fmt.Errorf("net mode %s takes no secrets: secrets are added by the proxy of mode limited", mode)
		}
	case Limited:
	default:
		return nil, fmt.Errorf("unknown net mode %q: want none, limited or host", p.Mode)
	}
	c := &Compiled{policy: Policy{
		Mode:         mode,
		AllowedHosts: make([]string, 0, len(p.AllowedHosts)),
		DeniedHosts:  make([]string, 0, len(p.DeniedHosts)),
	}}
	var errs []error
	parse := func(field string, patterns []string, dst *[]compiledRule, canon *[]string) {
		for _, s := range patterns {
			r, err := ParseRule(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field, err))
				continue
			}
			*dst = append(*dst, compiledRule{r, r.String()})
			*canon = append(*canon, r.String())
		}
	}
	var plain []string
	for _, s := range p.AllowedHosts {
		hr, isHTTP, err := ParseHTTPRule(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("allowed_hosts: %w", err))
		case isHTTP:
			c.httpRules = append(c.httpRules, compiledHTTPRule{hr, hr.String()})
			c.policy.AllowedHosts = append(c.policy.AllowedHosts, hr.String())
		default:
			plain = append(plain, s)
		}
	}
	parse("allowed_hosts", plain, &c.allow, &c.policy.AllowedHosts)
	parse("denied_hosts", p.DeniedHosts, &c.deny, &c.policy.DeniedHosts)
	var serrs []error
	c.secrets, serrs = compileSecrets(p.Secrets)
	errs = append(errs, serrs...)
	for _, s := range c.secrets {
		c.policy.Secrets = append(c.policy.Secrets, s.Secret)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Mode returns the policy's mode ([None] for a nil Compiled).
func (c *Compiled) Mode() Mode {
	if c == nil {
		return None
	}
	return c.policy.Mode
}

// Policy returns the policy c was compiled from, with the mode normalized
// and every pattern in its canonical form.
func (c *Compiled) Policy() Policy {
	if c == nil {
		return Policy{Mode: None}
	}
	p := c.policy
	p.AllowedHosts = append([]string(nil), p.AllowedHosts...)
	p.DeniedHosts = append([]string(nil), p.DeniedHosts...)
	p.Secrets = append([]Secret(nil), p.Secrets...)
	return p
}

// Secrets returns the policy's secrets with their placeholders (those
// [Compile] made where none was given) and the values given inline, if
// any (the proxy's values come from its [SecretSource]).
func (c *Compiled) Secrets() []Secret {
	if c == nil {
		return nil
	}
	return append([]Secret(nil), c.policy.Secrets...)
}

// Intercepts reports whether the proxy terminates TLS for connections to
// host (a name as the client gave it) on port: a secret is bound to it or
// an HTTP rule names it. Other hosts get a plain tunnel.
func (c *Compiled) Intercepts(host string, port int) bool {
	if c.Mode() != Limited {
		return false
	}
	h := normalizeHost(host)
	for i := range c.secrets {
		if c.secrets[i].boundTo(h, port) {
			return true
		}
	}
	for _, r := range c.httpRules {
		if r.Host.matchName(h, port) {
			return true
		}
	}
	return false
}

// NeedsInterception reports whether any host of c is intercepted: c has
// secrets or HTTP rules, so the sandbox must trust the proxy's CA.
func (c *Compiled) NeedsInterception() bool {
	return c != nil && c.Mode() == Limited && len(c.secrets)+len(c.httpRules) > 0
}

// CheckRequest decides on one HTTP request, with its method and its path
// normalised by [NormalizePath], to a host that [Compiled.CheckName]
// allowed. A plain allow rule for the host allows every request; else an
// HTTP rule must allow the method and path, and when none does the
// verdict is [ReasonHTTPRule] with Rule listing the host's HTTP rules
// ("; "-separated), or [ReasonPathParam] when one would have allowed it
// but for a path parameter. A host no HTTP rule names is decided by CheckName
// alone.
func (c *Compiled) CheckRequest(host string, port int, method, path string) Decision {
	d := c.CheckName(host, port)
	if !d.Allowed || c.Mode() != Limited {
		return d
	}
	h := normalizeHost(host)
	for _, r := range c.allow {
		if r.matchName(h, port) {
			return d
		}
	}
	var named []string
	reason := ReasonHTTPRule
	for _, r := range c.httpRules {
		if !r.Host.matchName(h, port) {
			continue
		}
		ok, param := r.allows(method, path)
		if ok {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
		if param {
			reason = ReasonPathParam
		}
		named = append(named, r.text)
	}
	if named == nil {
		return d
	}
	return Decision{Rule: strings.Join(named, "; "), Reason: reason}
}

// hasHTTPRules reports whether an HTTP rule names host:port.
func (c *Compiled) hasHTTPRules(host string, port int) bool {
	if c.Mode() != Limited {
		return false
	}
	h := normalizeHost(host)
	for _, r := range c.httpRules {
		if r.Host.matchName(h, port) {
			return true
		}
	}
	return false
}

// Decision is the verdict for one destination.
type Decision struct {
	Allowed bool
	Rule    string // the canonical pattern that decided, "" if none did
	Reason  string // one of the Reason constants
}

// String renders d as "allow (allowed by rule example.com)" or
// "deny (not allowed)".
func (d Decision) String() string {
	v := "deny"
	if d.Allowed {
		v = "allow"
	}
	if d.Rule != "" {
		return fmt.Sprintf("%s (%s %s)", v, d.Reason, d.Rule)
	}
	return fmt.Sprintf("%s (%s)", v, d.Reason)
}

// modeDecision answers for every mode but limited.
func (c *Compiled) modeDecision() (Decision, bool) {
	switch c.Mode() {
	case Limited:
		return Decision{}, false
	case Host:
		return Decision{Allowed: true, Reason: ReasonHostNetwork}, true
	}
	return Decision{Reason: ReasonNetworkOff}, true
}

// CheckName decides on a destination given as a host name or an IP
// literal (brackets allowed) and a port, before anything is resolved. Name
// rules match names only; IP and CIDR rules match IP literals only. Deny
// rules are consulted first and win. For an IP literal the proxy must also
// call [Compiled.CheckAddr], which applies the private-address guard; for
// a name it calls CheckAddr on every address the name resolves to.
func (c *Compiled) CheckName(host string, port int) Decision {
	if d, done := c.modeDecision(); done {
		return d
	}
	if port < 1 || port > 65535 {
		return Decision{Reason: ReasonBadPort}
	}
	h := normalizeHost(host)
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return Decision{Reason: ReasonInvalidHost}
		}
		return c.matchAddr(ip.Unmap(), port, false)
	}
	if checkName(h) != "" {
		return Decision{Reason: ReasonInvalidHost}
	}
	for _, r := range c.deny {
		if r.matchName(h, port) {
			return Decision{Rule: r.text, Reason: ReasonDenied}
		}
	}
	for _, r := range c.allow {
		if r.matchName(h, port) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	for _, r := range c.httpRules {
		if r.Host.matchName(h, port) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	return Decision{Reason: ReasonNotAllowed}
}

// matchAddr applies the IP and CIDR rules to ip: deny rules first, then
// allow rules; with none matching, the verdict is not allowed, or, when
// public is set and ip is not private, allowed as a public address.
func (c *Compiled) matchAddr(ip netip.Addr, port int, public bool) Decision {
	for _, r := range c.deny {
		if r.matchAddr(ip, port) {
			return Decision{Rule: r.text, Reason: ReasonDenied}
		}
	}
	for _, r := range c.allow {
		if r.matchAddr(ip, port) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	if !public {
		return Decision{Reason: ReasonNotAllowed}
	}
	if IsPrivate(ip) {
		return Decision{Reason: ReasonPrivate}
	}
	return Decision{Allowed: true, Reason: ReasonPublic}
}

// CheckAddr decides on an address a destination resolved to (or an IP
// literal destination that [Compiled.CheckName] allowed). It is the second
// gate, never the only one: a public address passes without a rule,
// because CheckName already decided on the name. An address covered by an
// IP or CIDR deny rule is refused; a private address (see [IsPrivate]) is
// refused unless an IP or CIDR allow rule covers it and the port. IPv4-mapped
// IPv6 addresses are judged as the IPv4 address they carry; zones are
// ignored.
func (c *Compiled) CheckAddr(ip netip.Addr, port int) Decision {
	if d, done := c.modeDecision(); done {
		return d
	}
	if port < 1 || port > 65535 {
		return Decision{Reason: ReasonBadPort}
	}
	if !ip.IsValid() {
		return Decision{Reason: ReasonInvalidHost}
	}
	return c.matchAddr(ip.WithZone("").Unmap(), port, true)
}

// normalizeHost strips brackets around an IPv6 literal and one trailing
// dot, and lower-cases ASCII letters.
func normalizeHost(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(asciiLower(h), ".")
}

// DefaultCatchPorts are the TCP ports a transparent sandbox catches for an
// allow rule that names no port (see [Compiled.CatchPorts]): SSH (and git
// over SSH), HTTP and HTTPS. A rule that names a port is caught on that
// port only.
var DefaultCatchPorts = []int{22, 80, 443}

// CatchPorts returns, sorted and without repeats, the TCP ports on which a
// transparent sandbox must catch connections for the allow rules of c to
// be reachable without a proxy: each rule's port, or [DefaultCatchPorts]
// for a rule without one. Deny rules add none. A nil or non-limited
// policy catches nothing.
func (c *Compiled) CatchPorts() []int {
	if c.Mode() != Limited {
		return nil
	}
	seen := map[int]bool{}
	var ports []int
	add := func(p int) {
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	rules := make([]Rule, 0, len(c.allow)+len(c.httpRules))
	for _, r := range c.allow {
		rules = append(rules, r.Rule)
	}
	for _, r := range c.httpRules {
		rules = append(rules, r.Host)
	}
	for _, r := range rules {
		if r.port != 0 {
			add(int(r.port))
			continue
		}
		for _, p := range DefaultCatchPorts {
			add(p)
		}
	}
	slices.Sort(ports)
	return ports
}

// checkListedAddr decides whether the stub DNS may answer a name that no
// name rule allows with ip, an address the host's hosts file lists for
// it: when an IP or CIDR allow rule covers ip (on some port) and no deny
// rule without a port does, as a program inside that read the same file
// could connect to ip.
func (c *Compiled) checkListedAddr(ip netip.Addr) Decision {
	if c.Mode() != Limited || !ip.IsValid() {
		return Decision{Reason: ReasonNotAllowed}
	}
	ip = ip.WithZone("").Unmap()
	for _, r := range c.deny {
		if r.port == 0 && r.matchAddr(ip, 1) {
			return Decision{Rule: r.text, Reason: ReasonDenied}
		}
	}
	for _, r := range c.allow {
		if r.kind == rulePrefix && r.prefix.Contains(ip) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	return Decision{Reason: ReasonNotAllowed}
}

// CheckDNS decides whether the stub DNS of a transparent sandbox answers
// for name: when some allow rule matches it on some port and no deny rule
// without a port matches it (a deny rule with a port refuses only that
// port, at connection time). IP literals and invalid names are refused.
func (c *Compiled) CheckDNS(name string) Decision {
	if d, done := c.modeDecision(); done {
		if d.Allowed { // mode host: nothing to fake
			return Decision{Reason: ReasonNetworkOff}
		}
		return d
	}
	h := normalizeHost(name)
	if _, err := netip.ParseAddr(h); err == nil || checkName(h) != "" {
		return Decision{Reason: ReasonInvalidHost}
	}
	for _, r := range c.deny {
		if r.port == 0 && r.matchName(h, 1) {
			return Decision{Rule: r.text, Reason: ReasonDenied}
		}
	}
	for _, r := range c.allow {
		if r.kind != rulePrefix && r.matchName(h, int(max(r.port, 1))) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	for _, r := range c.httpRules {
		if r.Host.matchName(h, int(max(r.Host.port, 1))) {
			return Decision{Allowed: true, Rule: r.text, Reason: ReasonAllowed}
		}
	}
	return Decision{Reason: ReasonNotAllowed}
}
