package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRuleValid(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"  example.com  ", "example.com"},
		{"example.com:443", "example.com:443"},
		{"example.com:0443", "example.com:443"},
		{"*.example.com", "*.example.com"},
		{"*.Example.com.:8443", "*.example.com:8443"},
		{"*.example.co.uk", "*.example.co.uk"},
		{"*.api.example.test", "*.api.example.test"},
		{"localhost", "localhost"},
		{"_srv.example.com", "_srv.example.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"a-b.c-d.example:1", "a-b.c-d.example:1"},
		{"example.com:65535", "example.com:65535"},
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:80", "203.0.113.7:80"},
		{"10.0.0.1/32", "10.0.0.1"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.0.0.0/8:5432", "10.0.0.0/8:5432"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8:0::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443"},
		{"::1", "::1"},
		{"[::1]:8080", "[::1]:8080"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"[::ffff:10.0.0.0/104]:22", "10.0.0.0/8:22"},
		{"[127.0.0.1]:80", "127.0.0.1:80"},
	} {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Errorf("ParseRule(%q) does not round-trip: %v %v", r.String(), again, err)
		}
	}
}

func TestParseRuleRejects(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		// empty
		{"", "empty pattern"},
		{"   ", "empty pattern"},
		{":443", "empty host"},
		{"*.", "matches every host"},
		{"*..", "empty host"},
		// match-everything
		{"*", "matches every host"},
		{"*:443", "matches every host"},
		{"0.0.0.0/0", "length 0"},
		{"::/0", "length 0"},
		{"[::ffff:0:0/96]", "length 0"},
		// wildcards over public suffixes and TLDs
		{"*.com", "public suffix"},
		{"*.COM.", "public suffix"},
		{"*.co.uk", "public suffix"},
		{"*.github.io", "public suffix"},
		{"*.test", "public suffix"},
		{"*.localhost", "public suffix"},
		{"*.internal:443", "public suffix"},
		{"*.nosuchtld", "public suffix"},
		// misplaced wildcards
		{"foo*.com", "whole leftmost label"},
		{"*foo.example.com", "whole leftmost label"},
		{"a.*.example.com", "whole leftmost label"},
		{"*.*.example.com", "whole leftmost label"},
		{"**.example.com", "whole leftmost label"},
		{"example.*", "whole leftmost label"},
		{".example.com", "leading dot"},
		// URLs
		{"https://example.com", "scheme"},
		{"http://example.com:80/", "scheme"},
		{"example.com/path", "path"},
		{"example.com/", "path"},
		{"user@example.com", "user info"},
		{"example.com?q=1", "query"},
		{"example.com#top", "fragment"},
		// ports
		{"example.com:", "empty port"},
		{"example.com:0", "out of range"},
		{"example.com:65536", "out of range"},
		{"example.com:999999", "out of range"},
		{"example.com:http", "not a decimal number"},
		{"example.com:-1", "not a decimal number"},
		{"example.com:+80", "not a decimal number"},
		{"example.com:80:81", "not an IPv6 address"},
		{"[2001:db8::1]:", "empty port"},
		{"[2001:db8::1]:0", "out of range"},
		{"[2001:db8::1]x", "after ']'"},
		{"[2001:db8::1", "missing ']'"},
		{"2001:db8::1]:80", "misplaced"},
		// addresses
		{"10.0.0.0/33", "bad CIDR"},
		{"10.0.0.0/x", "bad CIDR"},
		{"fe80::1%eth0", "zones"},
		{"[fe80::1%eth0]:80", "zones"},
		{"[example.com]:80", "brackets"},
		{"10.0.0.256", "numeric label"},
		{"010.0.0.1", "numeric label"},
		{"127.1", "numeric label"},
		{"2130706433", "numeric label"},
		// names
		{"exa mple.com", "white space"},
		{"example..com", "empty label"},
		{"example.com..", "empty label"},
		{"ex!ample.com", "invalid character"},
		{"bücher.example", "punycode"},
		{"\u212Aexample.com", "punycode"},
		{strings.Repeat("a", 64) + ".com", "63"},
		{strings.Repeat("a.", 127) + "com", "253"},
	} {
		_, err := ParseRule(tc.in)
		var re *RuleError
		if !errors.As(err, &re) {
			t.Errorf("ParseRule(%q) = %v, want a *RuleError", tc.in, err)
			continue
		}
		if re.Pattern != tc.in || !strings.Contains(re.Reason, tc.reason) {
			t.Errorf("ParseRule(%q): %v, want reason with %q", tc.in, err, tc.reason)
		}
		if !strings.Contains(err.Error(), tc.in) && tc.in != "" {
			t.Errorf("ParseRule(%q): error %q does not name the pattern", tc.in, err)
		}
	}
}

func TestRuleZero(t *testing.T) {
	var r Rule
	if r.String() != "" || r.matchName("example.com", 80) || r.IsAddr() {
		t.Error("the zero Rule must match nothing")
	}
}
