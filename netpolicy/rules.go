package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// maxNameLen is the longest host name DNS can carry (RFC 1035, without the
// trailing dot).
const maxNameLen = 253

type ruleKind uint8

const (
	ruleExact    ruleKind = iota + 1 // one host name
	ruleWildcard                     // every name strictly below a suffix
	rulePrefix                       // an IP address or CIDR prefix
)

// Rule is one parsed host pattern: an exact host name, a wildcard over the
// subdomains of a name, or an IP address or CIDR prefix, each optionally
// limited to one port. The zero Rule matches nothing. Rules are comparable
// with ==; two patterns that mean the same thing ("Example.COM." and
// "example.com", "10.0.0.1/32" and "10.0.0.1") parse to equal rules.
type Rule struct {
	kind   ruleKind
	name   string       // ruleExact: the name; ruleWildcard: the suffix after "*."
	prefix netip.Prefix // rulePrefix: masked, IPv4 never in its IPv4-mapped form
	port   uint16       // 0: any port
}

// RuleError reports a pattern that [ParseRule] rejected.
type RuleError struct {
	Pattern string // the pattern as given
	Reason  string // why it was rejected, and what to write instead
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("invalid host pattern %q: %s", e.Pattern, e.Reason)
}

// ParseRule parses one host pattern:
//
//	example.com            exactly that host, any port
//	example.com:443        exactly that host, port 443
//	*.example.com          every subdomain of example.com (not example.com itself)
//	*.example.com:8443     the same, port 8443 only
//	203.0.113.7            one IPv4 address; 203.0.113.7:80 with a port
//	10.0.0.0/8             a CIDR prefix; 10.0.0.0/8:5432 with a port
//	2001:db8::1            one IPv6 address; [2001:db8::1]:443 with a port
//	2001:db8::/32          an IPv6 prefix; [2001:db8::/32]:443 with a port
//
// Names are case-insensitive and a trailing dot is ignored. Surrounding
// white space is trimmed. ParseRule rejects, with a [*RuleError] that
// says why: empty patterns; "*"; a wildcard over a public suffix or a
// top-level domain ("*.com", "*.co.uk", "*.github.io", "*.test", any
// single label), judged by the public suffix list; a wildcard anywhere but
// as the whole leftmost label ("foo*.com", "a.*.com"); URL schemes, paths,
// user info, queries; ports that are empty, not decimal, 0 or above 65535;
// IPv6 zones; prefixes of length 0 (they match every address, like "*");
// names that are not valid DNS host names, including names whose last label
// is numeric (they are neither a host name nor an IP address). Non-ASCII
// names must be given in their punycode ("xn--") form.
func ParseRule(pattern string) (Rule, error) {
	r, reason := parseRule(strings.TrimSpace(pattern))
	if reason != "" {
		return Rule{}, &RuleError{Pattern: pattern, Reason: reason}
	}
	return r, nil
}

func parseRule(s string) (Rule, string) {
	if s == "" {
		return Rule{}, "empty pattern"
	}
	if strings.Contains(s, "://") {
		return Rule{}, "a URL scheme is not allowed: give the host alone, as in example.com or example.com:443"
	}
	for _, c := range s {
		switch {
		case c <= ' ' || c == 0x7f:
			return Rule{}, "white space or control characters are not allowed"
		case c == '@':
			return Rule{}, "user info is not allowed: give the host alone"
		case c == '?' || c == '#':
			return Rule{}, "a query or fragment is not allowed: give the host alone"
		case c >= 0x80:
			return Rule{}, "non-ASCII host names must be given in punycode (xn--) form"
		}
	}
	host, port, bracketed, reason := splitPattern(s)
	if reason != "" {
		return Rule{}, reason
	}
	var r Rule
	if port != "" {
		p, reason := parsePort(port)
		if reason != "" {
			return Rule{}, reason
		}
		r.port = p
	}
	if host == "" {
		return Rule{}, "empty host"
	}
	if strings.Contains(host, "%") {
		return Rule{}, "IPv6 zones are not allowed"
	}
	if addr, rest, isCIDR := strings.Cut(host, "/"); isCIDR {
		if _, err := netip.ParseAddr(addr); err != nil {
			return Rule{}, "a path is not allowed: give the host alone"
		}
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, fmt.Sprintf("bad CIDR prefix length %q", rest)
		}
		return r.withPrefix(p)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return r.withPrefix(netip.PrefixFrom(a, a.BitLen()))
	}
	if bracketed {
		return Rule{}, "brackets hold only IPv6 addresses and prefixes"
	}
	name, wildcard, reason := parseName(host)
	if reason != "" {
		return Rule{}, reason
	}
	r.kind, r.name = ruleExact, name
	if wildcard {
		r.kind = ruleWildcard
	}
	return r, ""
}

// splitPattern separates the host from an optional port: "[v6]:port",
// "[v6]", a bare IPv6 address or prefix (two colons or more, no port), or
// "host:port".
func splitPattern(s string) (host, port string, bracketed bool, reason string) {
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", true, "missing ']' after the IPv6 address"
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, "", true, ""
		}
		if rest[0] != ':' {
			return "", "", true, fmt.Sprintf("unexpected %q after ']': want :PORT", rest)
		}
		if rest[1:] == "" {
			return "", "", true, "empty port after ':'"
		}
		return host, rest[1:], true, ""
	}
	if strings.ContainsAny(s, "[]") {
		return "", "", false, "misplaced '[' or ']': write IPv6 with a port as [2001:db8::1]:443"
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, ""
	case 1:
		host, port, _ := strings.Cut(s, ":")
		if port == "" {
			return "", "", false, "empty port after ':'"
		}
		return host, port, false, ""
	}
	if _, err := netip.ParseAddr(s); err != nil {
		if _, err := netip.ParsePrefix(s); err != nil && !strings.Contains(s, "%") {
			return "", "", false, "not an IPv6 address or prefix: put IPv6 in brackets to add a port, as in [2001:db8::1]:443"
		}
	}
	return s, "", false, ""
}

func parsePort(s string) (uint16, string) {
	if len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		if strings.Trim(s, "0123456789") == "" {
			return 0, fmt.Sprintf("port %s out of range 1-65535", s)
		}
		return 0, fmt.Sprintf("port %q is not a decimal number", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Sprintf("port %s out of range 1-65535", s)
	}
	return uint16(n), ""
}

// withPrefix completes r as an address rule: IPv4-mapped IPv6 is stored as
// IPv4 (destinations are unmapped before matching), host bits are masked.
func (r Rule) withPrefix(p netip.Prefix) (Rule, string) {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if p.Bits() == 0 {
		return Rule{}, "a prefix of length 0 matches every address: list the networks you need"
	}
	r.kind, r.prefix = rulePrefix, p.Masked()
	return r, ""
}

// parseName lower-cases a host-name pattern, drops one trailing dot and
// checks it, reporting whether it is a "*." wildcard (returned without the
// "*.").
func parseName(s string) (name string, wildcard bool, reason string) {
	s = strings.TrimSuffix(asciiLower(s), ".")
	if s == "*" {
		return "", false, "* matches every host: list the hosts you need"
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		wildcard, s = true, rest
	}
	if strings.Contains(s, "*") {
		return "", false, "a wildcard must be the whole leftmost label, as in *.example.com"
	}
	if s == "" {
		return "", false, "empty host"
	}
	if s[0] == '.' {
		return "", false, "a leading dot is not a wildcard: write *.example.com for subdomains"
	}
	if reason := checkName(s); reason != "" {
		return "", false, reason
	}
	if suffix, _ := publicsuffix.PublicSuffix(s); wildcard && suffix == s {
		return "", false, fmt.Sprintf("*.%s would match every name under the public suffix %q: name the domains you need", s, s)
	}
	return s, wildcard, ""
}

// checkName reports why s (lower case, no trailing dot) is not a DNS host
// name, or "" when it is one. Underscores are accepted, as in SRV-style
// and some internal names.
func checkName(s string) string {
	if len(s) > maxNameLen {
		return fmt.Sprintf("host name longer than %d characters", maxNameLen)
	}
	label, numeric := 0, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return "empty label in host name"
			}
			label, numeric = 0, true
			continue
		case 'a' <= c && c <= 'z', c == '-', c == '_':
			numeric = false
		case '0' <= c && c <= '9':
		case c >= 0x80:
			return "non-ASCII host names must be given in punycode (xn--) form"
		default:
			return fmt.Sprintf("invalid character %q in host name", c)
		}
		if label++; label > 63 {
			return "host name label longer than 63 characters"
		}
	}
	if label == 0 {
		return "empty label in host name"
	}
	if numeric {
		return "not a valid IP address, and a host name cannot end in a numeric label"
	}
	return ""
}

// String returns the canonical pattern: lower case, no trailing dot,
// masked prefixes, single addresses without "/32" or "/128", IPv6 in
// brackets when a port follows. It parses back to an equal Rule.
func (r Rule) String() string {
	var h string
	switch r.kind {
	case ruleExact:
		h = r.name
	case ruleWildcard:
		h = "*." + r.name
	case rulePrefix:
		if r.prefix.IsSingleIP() {
			h = r.prefix.Addr().String()
		} else {
			h = r.prefix.String()
		}
		if r.port != 0 && r.prefix.Addr().Is6() {
			h = "[" + h + "]"
		}
	default:
		return ""
	}
	if r.port != 0 {
		h += ":" + strconv.Itoa(int(r.port))
	}
	return h
}

// IsAddr reports whether r is an IP address or CIDR rule (the only kind
// that can admit a private address; see [Compiled.CheckAddr]).
func (r Rule) IsAddr() bool { return r.kind == rulePrefix }

func (r Rule) portMatches(port int) bool { return r.port == 0 || int(r.port) == port }

// matchName reports whether r matches name (normalized: lower case, no
// trailing dot, a valid host name) on port. "*.example.com" matches
// "a.example.com" and "a.b.example.com", never "example.com" nor
// "evilexample.com".
func (r Rule) matchName(name string, port int) bool {
	if !r.portMatches(port) {
		return false
	}
	switch r.kind {
	case ruleExact:
		return name == r.name
	case ruleWildcard:
		return len(name) > len(r.name)+1 && strings.HasSuffix(name, r.name) &&
			name[len(name)-len(r.name)-1] == '.'
	}
	return false
}

// matchAddr reports whether r covers ip (unmapped, no zone) on port.
func (r Rule) matchAddr(ip netip.Addr, port int) bool {
	return r.kind == rulePrefix && r.portMatches(port) && r.prefix.Contains(ip)
}

// asciiLower lower-cases ASCII letters only (strings.ToLower would turn the
// Kelvin sign into "k").
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
