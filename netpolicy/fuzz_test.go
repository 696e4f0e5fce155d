package netpolicy

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/publicsuffix"
)

var fuzzSeeds = []string{
	"example.com", "*.example.com", "example.com:443", "*.example.co.uk:8443", "*", "*.com",
	"*.co.uk", "*.test", "foo*.com", "a.*.com", "https://example.com/", "example.com/x", "",
	"10.0.0.0/8", "10.0.0.1:80", "[2001:db8::/32]:443", "2001:db8::1", "::ffff:10.0.0.1",
	"[::1]:0", "example.com:65536", "Example.COM.", "fe80::1%lo", "0.0.0.0/0", "127.1",
}

// FuzzParseRule: ParseRule never panics; an accepted rule's String parses
// back to an equal rule; "*" and wildcards over public suffixes are never
// accepted.
func FuzzParseRule(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if r != (Rule{}) {
				t.Fatalf("ParseRule(%q) failed but returned %v", s, r)
			}
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q) = %q, which parses to %q, %v", s, r.String(), again.String(), err)
		}
		if strings.TrimSpace(s) == "*" || r.String() == "*" {
			t.Fatalf("ParseRule(%q) accepted a match-everything pattern", s)
		}
		if r.kind == ruleWildcard {
			if suffix, _ := publicsuffix.PublicSuffix(r.name); suffix == r.name {
				t.Fatalf("ParseRule(%q) accepted a wildcard over the public suffix %q", s, r.name)
			}
		}
		if r.kind == rulePrefix && r.prefix.Bits() == 0 {
			t.Fatalf("ParseRule(%q) accepted a prefix of length 0", s)
		}
	})
}

// FuzzMatch: CheckName and CheckAddr never panic, and a deny rule always
// wins: whatever a deny rule d matches is refused by d even when the same
// pattern (and another) is also allowed.
func FuzzMatch(f *testing.F) {
	f.Add("*.example.com", "bad.example.com", "bad.example.com", uint16(443))
	f.Add("example.com", "example.com:80", "EXAMPLE.com.", uint16(80))
	f.Add("10.0.0.0/8", "10.1.0.0/16:22", "10.1.2.3", uint16(22))
	f.Add("[2001:db8::/32]:443", "2001:db8::1", "[2001:db8::1]", uint16(443))
	f.Add("*.example.com", "*.a.example.com", "x.a.example.com", uint16(1))
	f.Add("127.0.0.1", "0.0.0.0/1", "::ffff:127.0.0.1", uint16(8080))
	f.Fuzz(func(t *testing.T, allow, deny, host string, port uint16) {
		a, err1 := ParseRule(allow)
		d, err2 := ParseRule(deny)
		if err1 != nil || err2 != nil {
			return
		}
		both := mustCompile(t, []string{a.String(), d.String()}, []string{d.String()})
		only := mustCompile(t, []string{d.String()}, nil)
		p := int(port)
		got := both.CheckName(host, p)
		if only.CheckName(host, p).Allowed {
			if got.Allowed || got.Reason != ReasonDenied || got.Rule != d.String() {
				t.Fatalf("allow %q deny %q: CheckName(%q, %d) = %+v, want denied by %q", a, d, host, p, got, d)
			}
		}
		if got.Allowed && got.Rule != a.String() {
			t.Fatalf("allow %q deny %q: CheckName(%q, %d) = %+v, allowed by the wrong rule", a, d, host, p, got)
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			ad := both.CheckAddr(ip, p)
			if ad.Allowed && d.matchAddr(ip.WithZone("").Unmap(), p) {
				t.Fatalf("deny %q: CheckAddr(%s, %d) = %+v", d, ip, p, ad)
			}
			if ad.Allowed && IsPrivate(ip) && !a.matchAddr(ip.WithZone("").Unmap(), p) {
				t.Fatalf("allow %q: CheckAddr(%s, %d) = %+v admits a private address without a rule", a, ip, p, ad)
			}
		}
	})
}
