package netpolicy

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// ReasonHTTPRule is the reason of a request to a host that has HTTP rules
// (see [ParseHTTPRule]) when none of them allows its method and path.
const ReasonHTTPRule = "method or path not allowed"

// ReasonPathParam is the reason of a request whose path a rule's prefix
// would allow but for a path parameter past the prefix: a ';' (escaped or
// not), which servers such as Tomcat, Jetty and Spring cut off before
// routing ("/repos/org/..;/other" reads "/repos/other" there), or an
// escaped '%' (a server decoding twice reads "%252e" as "."). A rule
// allows them only where its own path names them.
const ReasonPathParam = "path parameter or double escape past the rule's path"

// ReasonBadPath is the reason of a request whose path cannot be
// normalised safely (an encoded slash or backslash, a ".." above the root,
// a bad escape) to a host with HTTP rules.
const ReasonBadPath = "ambiguous path"

// HTTPRule is an allow rule that also names the methods and the path
// prefix of the requests it allows; see [ParseHTTPRule].
type HTTPRule struct {
	Host    Rule     // an exact or wildcard host name rule
	Methods []string // upper case; nil allows every method
	Path    string   // normalised path prefix, "" allows every path
}

// ParseHTTPRule parses an allow rule that names methods, a path prefix or
// both:
//
//	GET,HEAD api.github.com/repos/ORG/   GET and HEAD under /repos/ORG/
//	api.example.com/v1/                  any method under /v1/
//	POST uploads.example.com             POST to any path
//	GET *.example.com:8443/status        GET of /status on every subdomain, port 8443
//
// Methods are case-insensitive tokens separated by commas, before the
// host and a space. The host is a name pattern of [ParseRule] (IP and CIDR
// hosts take no HTTP rule). The path starts at the first "/" after the
// host; it is normalised as request paths are (see [NormalizePath]) and
// matched as a prefix: one ending in "/" matches everything below it, one
// that does not matches itself and everything below "itself/" (so
// "/repos/org" never matches "/repos/organisation"). Past the prefix, a
// path may hold no ';' and no escaped '%' (see [ReasonPathParam]): a
// rule allows them only by naming them in its prefix ("GET
// api.example.com/v1;version=2/"). The query is not part of the match. The second result is false when s is a plain host
// pattern (no method, no path), which [ParseRule] parses instead.
func ParseHTTPRule(s string) (HTTPRule, bool, error) {
	s = strings.TrimSpace(s)
	var r HTTPRule
	rest := s
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		methods := s[:i]
		rest = strings.TrimSpace(s[i+1:])
		for _, m := range strings.Split(methods, ",") {
			m = strings.ToUpper(strings.TrimSpace(m))
			if m == "" || !isToken(m) {
				return HTTPRule{}, true, &RuleError{Pattern: s, Reason: fmt.Sprintf("bad method %q: write methods as GET,HEAD before the host", m)}
			}
			if m == http.MethodConnect {
				return HTTPRule{}, true, &RuleError{Pattern: s, Reason: "CONNECT is not a method an HTTP rule can allow"}
			}
			if !slices.Contains(r.Methods, m) {
				r.Methods = append(r.Methods, m)
			}
		}
	}
	host := rest
	if r.Methods == nil && strings.Contains(rest, "://") {
		return HTTPRule{}, false, nil // a URL: ParseRule says what to write
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, r.Path = rest[:i], rest[i:]
		if r.Methods == nil && isCIDR(rest) {
			return HTTPRule{}, false, nil // 10.0.0.0/8: an address rule
		}
	} else if r.Methods == nil {
		return HTTPRule{}, false, nil
	}
	hr, err := ParseRule(host)
	if err != nil {
		return HTTPRule{}, true, &RuleError{Pattern: s, Reason: err.(*RuleError).Reason}
	}
	if hr.IsAddr() {
		return HTTPRule{}, true, &RuleError{Pattern: s, Reason: "an HTTP rule (methods or a path) needs a host name, not an IP address"}
	}
	r.Host = hr
	if r.Path != "" {
		if strings.ContainsAny(r.Path, "?#") {
			return HTTPRule{}, true, &RuleError{Pattern: s, Reason: "a path prefix takes no query or fragment"}
		}
		p, ok := NormalizePath(r.Path)
		if !ok {
			return HTTPRule{}, true, &RuleError{Pattern: s, Reason: "the path has an encoded '/' or '\\', a bad escape or a '..' above the root"}
		}
		if p == "/" {
			p = "" // every path
		}
		r.Path = p
	}
	return r, true, nil
}

// isCIDR reports whether s (holding a '/') reads as an address prefix,
// "10.0.0.0/8" or "[2001:db8::/32]:443", rather than a host and a path.
func isCIDR(s string) bool {
	i := strings.IndexByte(s, '/')
	_, err := netip.ParseAddr(strings.TrimPrefix(s[:i], "["))
	return err == nil && strings.Trim(s[i+1:], "]:0123456789") == ""
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// String returns the rule's canonical form, "GET,HEAD api.github.com/repos/org/".
func (r HTTPRule) String() string {
	s := r.Host.String() + r.Path
	if len(r.Methods) > 0 {
		s = strings.Join(r.Methods, ",") + " " + s
	}
	return s
}

// allows reports whether r allows method on path (normalised). When it
// would but for what follows its prefix in path, a ';' or an escaped '%'
// (see [ReasonPathParam]), it returns false and param true.
func (r HTTPRule) allows(method, path string) (ok, param bool) {
	if r.Methods != nil && !slices.Contains(r.Methods, method) || !pathUnder(path, r.Path) {
		return false, false
	}
	if r.Path != "" && hasPathParam(path[len(r.Path):]) {
		return false, true
	}
	return true, false
}

// hasPathParam reports whether p (part of a normalised path) holds a
// ';', escaped or not, or an escaped '%': what a server may read
// otherwise than as part of a segment's name.
func hasPathParam(p string) bool {
	p = strings.ToUpper(p)
	return strings.Contains(p, ";") || strings.Contains(p, "%3B") || strings.Contains(p, "%25")
}

// pathUnder reports whether path is prefix or below it.
func pathUnder(path, prefix string) bool {
	if prefix == "" || path == prefix {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return strings.HasPrefix(path, prefix+"/")
}

// NormalizePath returns the form of an escaped URL path that HTTP rules
// are matched against, and that the proxy sends upstream in place of the
// path the client wrote: percent-escapes of unreserved characters decoded
// (so "%2e%2e" is ".." and "%72epos" is "repos"), other escapes kept with
// upper-case hex digits, empty segments ("//") removed, "." and ".."
// segments resolved. It returns false, and the request is refused, for
// what a server might read otherwise than the proxy: an escaped "/" or
// "\" (%2F, %5C), a literal "\", a NUL, an invalid escape, escapes of
// bytes that are not UTF-8 (an overlong "%C0%AE" some servers read as
// "."), a ".." that would climb above the root, or a path that does not
// start with "/".
func NormalizePath(p string) (string, bool) {
	if p == "" || p[0] != '/' {
		return "", false
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' || c == 0 || c == '?' || c == '#':
			return "", false
		case c == '%':
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return "", false
			}
			d := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			switch {
			case d == '/' || d == '\\' || d == 0:
				return "", false
			case unreserved(d):
				b.WriteByte(d)
			default:
				b.WriteByte('%')
				b.WriteByte(hex[d>>4])
				b.WriteByte(hex[d&15])
			}
		case c <= 0x20 || c >= 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	segs := strings.Split(b.String()[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	np := "/" + strings.Join(out, "/")
	if u, err := url.PathUnescape(np); err != nil || !utf8.ValidString(u) {
		return "", false // an overlong %C0%AE, which old servers read as '.'
	}
	return np, true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
