package netpolicy

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, allow, deny []string) *Compiled {
	t.Helper()
	c, err := Compile(Policy{Mode: Limited, AllowedHosts: allow, DeniedHosts: deny})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckName(t *testing.T) {
	c := mustCompile(t, []string{
		"exact.example", "*.example.com", "api.example.org:443", "*.svc.example.net:8443",
		"203.0.113.0/24", "[2001:db8::/32]:443", "198.51.100.7:80", "Upper.Example.",
	}, []string{"blocked.example.com", "*.bad.example.com", "203.0.113.66", "[2001:db8::bad]:443"})
	for _, tc := range []struct {
		host    string
		port    int
		allowed bool
		rule    string
		reason  string
	}{
		{"exact.example", 80, true, "exact.example", ReasonAllowed},
		{"EXACT.example.", 80, true, "exact.example", ReasonAllowed},
		{"sub.exact.example", 80, false, "", ReasonNotAllowed},
		{"upper.example", 1, true, "upper.example", ReasonAllowed},
		// *.example.com: subdomains at any depth, never the apex or look-alikes
		{"a.example.com", 443, true, "*.example.com", ReasonAllowed},
		{"a.b.c.example.com", 443, true, "*.example.com", ReasonAllowed},
		{"A.Example.Com.", 443, true, "*.example.com", ReasonAllowed},
		{"example.com", 443, false, "", ReasonNotAllowed},
		{"evilexample.com", 443, false, "", ReasonNotAllowed},
		{"a.evilexample.com", 443, false, "", ReasonNotAllowed},
		{"example.com.evil", 443, false, "", ReasonNotAllowed},
		{".example.com", 443, false, "", ReasonInvalidHost},
		// ports
		{"api.example.org", 443, true, "api.example.org:443", ReasonAllowed},
		{"api.example.org", 80, false, "", ReasonNotAllowed},
		{"x.svc.example.net", 8443, true, "*.svc.example.net:8443", ReasonAllowed},
		{"x.svc.example.net", 443, false, "", ReasonNotAllowed},
		{"exact.example", 0, false, "", ReasonBadPort},
		{"exact.example", 65536, false, "", ReasonBadPort},
		// deny wins
		{"blocked.example.com", 443, false, "blocked.example.com", ReasonDenied},
		{"x.bad.example.com", 443, false, "*.bad.example.com", ReasonDenied},
		{"bad.example.com", 443, true, "*.example.com", ReasonAllowed},
		{"203.0.113.66", 80, false, "203.0.113.66", ReasonDenied},
		{"[2001:db8::bad]", 443, false, "[2001:db8::bad]:443", ReasonDenied},
		// IP literals match IP rules only
		{"203.0.113.9", 80, true, "203.0.113.0/24", ReasonAllowed},
		{"::ffff:203.0.113.9", 80, true, "203.0.113.0/24", ReasonAllowed},
		{"203.0.114.1", 80, false, "", ReasonNotAllowed},
		{"2001:db8::1", 443, true, "[2001:db8::/32]:443", ReasonAllowed},
		{"[2001:DB8::1]", 443, true, "[2001:db8::/32]:443", ReasonAllowed},
		{"2001:db8::1", 80, false, "", ReasonNotAllowed},
		{"198.51.100.7", 80, true, "198.51.100.7:80", ReasonAllowed},
		{"198.51.100.7", 81, false, "", ReasonNotAllowed},
		// names never match IP rules, nor odd spellings of addresses
		{"127.1", 80, false, "", ReasonInvalidHost},
		{"2130706433", 80, false, "", ReasonInvalidHost},
		{"fe80::1%eth0", 80, false, "", ReasonInvalidHost},
		{"", 80, false, "", ReasonInvalidHost},
		{"a b.example.com", 80, false, "", ReasonInvalidHost},
		{"a\x00.example.com", 80, false, "", ReasonInvalidHost},
		{"*.example.com", 80, false, "", ReasonInvalidHost},
	} {
		d := c.CheckName(tc.host, tc.port)
		want := Decision{Allowed: tc.allowed, Rule: tc.rule, Reason: tc.reason}
		if d != want {
			t.Errorf("CheckName(%q, %d) = %+v, want %+v", tc.host, tc.port, d, want)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	c := mustCompile(t, []string{"public.example", "127.0.0.1", "10.1.0.0/16:5432", "[fd00::/8]:443"},
		[]string{"8.8.4.4", "10.1.2.3"})
	for _, tc := range []struct {
		addr    string
		port    int
		allowed bool
		reason  string
	}{
		{"93.184.215.14", 443, true, ReasonPublic},
		{"2606:4700::6810:84e5", 443, true, ReasonPublic},
		{"8.8.4.4", 53, false, ReasonDenied},
		{"::ffff:8.8.4.4", 53, false, ReasonDenied},
		// explicit allows open private addresses, ports included
		{"127.0.0.1", 80, true, ReasonAllowed},
		{"::ffff:127.0.0.1", 80, true, ReasonAllowed},
		{"127.0.0.2", 80, false, ReasonPrivate},
		{"10.1.9.9", 5432, true, ReasonAllowed},
		{"10.1.9.9", 5433, false, ReasonPrivate},
		{"10.1.2.3", 5432, false, ReasonDenied},
		{"fd00::1", 443, true, ReasonAllowed},
		{"fd00::1", 80, false, ReasonPrivate},
	} {
		d := c.CheckAddr(netip.MustParseAddr(tc.addr), tc.port)
		if d.Allowed != tc.allowed || d.Reason != tc.reason {
			t.Errorf("CheckAddr(%s, %d) = %+v, want allowed=%v reason=%q", tc.addr, tc.port, d, tc.allowed, tc.reason)
		}
	}
	if d := c.CheckAddr(netip.Addr{}, 80); d.Allowed {
		t.Errorf("CheckAddr(invalid) = %+v", d)
	}
}

func TestIsPrivate(t *testing.T) {
	private := []string{
		"127.0.0.1", "127.255.255.254", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.255", "100.100.100.200",
		"0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1",
		"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.1", "203.0.113.1",
		"::", "::1", "fe80::1", "fe80::1%eth0", "fc00::1", "fd12:3456::1", "fd00:ec2::254", "ff02::1",
		"fec0::1", "2001:db8::1", "100::1", "2001::1", "::127.0.0.1",
		// IPv4-mapped forms of all of these
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:100.64.0.1",
		"::ffff:192.168.0.1", "::ffff:0.0.0.0", "::ffff:224.0.0.1",
		// NAT64 and 6to4 carrying private IPv4
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2002:a00:1::", "64:ff9b:1::1",
	}
	public := []string{
		"8.8.8.8", "1.1.1.1", "93.184.215.14", "100.63.255.255", "100.128.0.0", "172.32.0.1",
		"169.253.255.255", "192.169.0.1", "::ffff:8.8.8.8", "2606:4700::1", "2a00:1450::1",
		"64:ff9b::808:808", "2002:808:808::1",
	}
	for _, s := range private {
		if !IsPrivate(netip.MustParseAddr(s)) {
			t.Errorf("IsPrivate(%s) = false", s)
		}
		c := mustCompile(t, []string{"allowed.example"}, nil)
		if d := c.CheckAddr(netip.MustParseAddr(s), 443); d.Allowed || d.Reason != ReasonPrivate {
			t.Errorf("CheckAddr(%s) without an IP rule = %+v", s, d)
		}
	}
	for _, s := range public {
		if IsPrivate(netip.MustParseAddr(s)) {
			t.Errorf("IsPrivate(%s) = true", s)
		}
	}
	if !IsPrivate(netip.Addr{}) {
		t.Error("the invalid address must count as private")
	}
}

// TestCIDRAllowsPrivate: an explicit CIDR allow admits the private addresses
// it covers, and only those.
func TestCIDRAllowsPrivate(t *testing.T) {
	c := mustCompile(t, []string{"192.168.0.0/16", "db.internal.example", "169.254.169.254"}, []string{"192.168.66.0/24"})
	for _, tc := range []struct {
		addr    string
		allowed bool
	}{
		{"192.168.1.10", true}, {"::ffff:192.168.1.10", true}, {"192.168.66.1", false},
		{"10.0.0.1", false}, {"169.254.169.254", true}, {"169.254.169.253", false},
	} {
		if d := c.CheckAddr(netip.MustParseAddr(tc.addr), 5432); d.Allowed != tc.allowed {
			t.Errorf("CheckAddr(%s) = %+v, want allowed=%v", tc.addr, d, tc.allowed)
		}
	}
	if d := c.CheckName("192.168.1.10", 5432); !d.Allowed || d.Rule != "192.168.0.0/16" {
		t.Errorf("CheckName(192.168.1.10) = %+v", d)
	}
}

func TestModes(t *testing.T) {
	var nilPolicy *Compiled
	none, _ := Compile(Policy{})
	host, _ := Compile(Policy{Mode: Host})
	empty, _ := Compile(Policy{Mode: Limited})
	for _, tc := range []struct {
		c       *Compiled
		allowed bool
		reason  string
	}{
		{nilPolicy, false, ReasonNetworkOff},
		{none, false, ReasonNetworkOff},
		{host, true, ReasonHostNetwork},
		{empty, false, ReasonNotAllowed},
	} {
		if d := tc.c.CheckName("example.com", 443); d.Allowed != tc.allowed || d.Reason != tc.reason {
			t.Errorf("mode %s: CheckName = %+v", tc.c.Mode(), d)
		}
	}
	if d := empty.CheckAddr(netip.MustParseAddr("127.0.0.1"), 80); d.Allowed {
		t.Errorf("empty limited policy: CheckAddr(127.0.0.1) = %+v", d)
	}
	for _, s := range []string{"", "none", "limited", "host"} {
		if m, err := ParseMode(s); err != nil || (s != "" && string(m) != s) {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("bridge"); err == nil || !strings.Contains(err.Error(), "none, limited or host") {
		t.Errorf("ParseMode(bridge) = %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string // "" for valid
	}{
		{Policy{}, ""},
		{Policy{Mode: Limited}, ""},
		{Policy{Mode: Limited, AllowedHosts: []string{"example.com"}, DeniedHosts: []string{"*.evil.example"}}, ""},
		{Policy{Mode: None, AllowedHosts: []string{"example.com"}}, "need mode limited"},
		{Policy{Mode: Host, DeniedHosts: []string{"example.com"}}, "need mode limited"},
		{Policy{Mode: "bridge"}, "unknown net mode"},
		{Policy{Mode: Limited, AllowedHosts: []string{"*.com", "ok.example", "https://x.example"}}, `allowed_hosts: invalid host pattern "*.com"`},
		{Policy{Mode: Limited, DeniedHosts: []string{"*"}}, `denied_hosts: invalid host pattern "*"`},
	} {
		err := tc.p.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	// every bad pattern is reported at once
	err := Policy{Mode: Limited, AllowedHosts: []string{"*.com", "https://x.example"}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "*.com") || !strings.Contains(err.Error(), "https://x.example") {
		t.Errorf("Validate: %v, want both patterns named", err)
	}
}

func TestPolicyJSON(t *testing.T) {
	var p Policy
	in := `{"mode":"limited","allowed_hosts":["Example.com."],"denied_hosts":["*.evil.example"]}`
	if err := json.Unmarshal([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	c, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(c.Policy())
	if want := `{"mode":"limited","allowed_hosts":["example.com"],"denied_hosts":["*.evil.example"]}`; string(out) != want {
		t.Errorf("canonical policy = %s, want %s", out, want)
	}
	if out, _ := json.Marshal(Policy{}); string(out) != `{"mode":""}` {
		t.Errorf("zero policy = %s", out)
	}
}

func TestDecisionString(t *testing.T) {
	if s := (Decision{Allowed: true, Rule: "example.com", Reason: ReasonAllowed}).String(); s != "allow (allowed by rule example.com)" {
		t.Error(s)
	}
	if s := (Decision{Reason: ReasonNotAllowed}).String(); s != "deny (not allowed)" {
		t.Error(s)
	}
}

func TestSummary(t *testing.T) {
	if s := Summary(nil); s != "" {
		t.Errorf("Summary(nil) = %q", s)
	}
	d := []Denial{
		{Host: "evil.example", Port: 443, Reason: ReasonNotAllowed, Count: 1},
		{Host: "10.0.0.1", Port: 80, Reason: ReasonPrivate, Count: 1},
	}
	if s, want := Summary(d), "blocked 2 connections: evil.example:443 (not allowed), 10.0.0.1:80 (private address)"; s != want {
		t.Errorf("Summary = %q, want %q", s, want)
	}
	d = []Denial{{Host: "2001:db8::1", Port: 443, Reason: ReasonDenied, Count: 3}}
	if s, want := Summary(d), "blocked 3 connections: [2001:db8::1]:443 (denied by rule, 3 times)"; s != want {
		t.Errorf("Summary = %q, want %q", s, want)
	}
	d = nil
	for i := range 8 {
		d = append(d, Denial{Host: "h" + string(rune('a'+i)) + ".example", Port: 80, Reason: ReasonNotAllowed, Count: 1})
	}
	if s := Summary(d); !strings.HasSuffix(s, "hd.example:80 (not allowed), he.example:80 (not allowed), and 3 more destinations") {
		t.Errorf("Summary = %q", s)
	}
}
