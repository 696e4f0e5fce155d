package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestFakeAddrsNeverChangeMeaning(t *testing.T) {
	f := fakeNames{max: 3}
	a, ok := f.lookup("api.example.com")
	if !ok || !FakeNet.Contains(a) || a == FakeNet.Addr() || a == netip.MustParseAddr("198.19.255.255") {
		t.Fatalf("lookup: %v %v, want an inner address of %v", a, ok, FakeNet)
	}
	if a != fakeAddr("api.example.com", 0) {
		t.Errorf("address %v is not the name's hash %v", a, fakeAddr("api.example.com", 0))
	}
	if again, _ := f.lookup("api.example.com"); again != a {
		t.Errorf("second lookup %v, want %v", again, a)
	}
	if n, ok := f.name(a); !ok || n != "api.example.com" {
		t.Errorf("name(%v) = %q %v", a, n, ok)
	}
	// A collision: the hash's first address is taken, the next is used,
	// and the first keeps its meaning.
	taken := fakeAddr("b.example.com", 0)
	f.byAddr[taken] = "squatter.example.com"
	f.byName["squatter.example.com"] = taken
	b, _ := f.lookup("b.example.com")
	if b != fakeAddr("b.example.com", 1) {
		t.Errorf("colliding name got %v, want the next candidate %v", b, fakeAddr("b.example.com", 1))
	}
	if n, _ := f.name(taken); n != "squatter.example.com" {
		t.Errorf("the taken address now means %q", n)
	}
	if _, ok := f.lookup("fourth.example.com"); ok {
		t.Error("a name past the cap got an address")
	}
	if n, ok := f.name(fakeAddr("never.asked.example", 0)); ok {
		t.Errorf("an address no name was given maps to %q", n)
	}
}

func TestCatchPortsAndCheckDNS(t *testing.T) {
	c := mustCompile(t,
		[]string{"example.com", "*.api.example:8443", "10.0.0.0/8:5432", "[2001:db8::1]:22", "other.example:443"},
		[]string{"bad.api.example", "example.com:80"})
	if got, want := c.CatchPorts(), []int{22, 80, 443, 5432, 8443}; !slices.Equal(got, want) {
		t.Errorf("CatchPorts = %v, want %v", got, want)
	}
	if got := (*Compiled)(nil).CatchPorts(); got != nil {
		t.Errorf("nil policy catches %v", got)
	}
	for _, tc := range []struct {
		name   string
		allow  bool
		reason string
	}{
		{"example.com", true, ReasonAllowed},
		{"EXAMPLE.com.", true, ReasonAllowed},
		{"x.api.example", true, ReasonAllowed}, // allowed on 8443 only: resolvable
		{"bad.api.example", false, ReasonDenied},
		{"api.example", false, ReasonNotAllowed}, // the wildcard's apex
		{"sub.example.com", false, ReasonNotAllowed},
		{"10.1.2.3", false, ReasonInvalidHost},
		{"a..b", false, ReasonInvalidHost},
	} {
		if d := c.CheckDNS(tc.name); d.Allowed != tc.allow || d.Reason != tc.reason {
			t.Errorf("CheckDNS(%q) = %v, want allowed=%v (%s)", tc.name, d, tc.allow, tc.reason)
		}
	}
	// example.com:80 is denied by a rule with a port: the name resolves,
	// the port is refused when connecting.
	if d := c.CheckName("example.com", 80); d.Allowed {
		t.Errorf("CheckName(example.com, 80) = %v", d)
	}
	if d := (*Compiled)(nil).CheckDNS("example.com"); d.Allowed {
		t.Errorf("nil policy answers DNS: %v", d)
	}
}

// waitServing waits until p serves n listeners: a test that ends before
// the harness's serve loops have started would see them return
// ErrProxyClosed.
func waitServing(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		got := len(p.listeners)
		p.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy serves %d listeners, want %d", got, n)
		}
	}
}

// stubDNS serves h's proxy's stub DNS on a loopback UDP socket with
// IP_PKTINFO, as tent's init makes it, and returns its address.
func stubDNS(t *testing.T, h *harness) string {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_PKTINFO, 1) })
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.proxy.ServeDNS(pc.(*net.UDPConn)) }()
	t.Cleanup(func() {
		h.proxy.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeDNS: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

// query asks server one question and returns the answer.
func query(t *testing.T, server, name string, typ dnsmessage.Type) dnsmessage.Message {
	t.Helper()
	c, err := net.Dial("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}}}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer for %s: %v", name, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if m.ID != 4242 || !m.Response || len(m.Questions) != 1 {
		t.Fatalf("bad answer header %+v", m.Header)
	}
	return m
}

func TestStubDNS(t *testing.T) {
	h := newHarness(t, []string{"*.allowed.test", "exact.test:5432"}, []string{"bad.allowed.test"})
	waitServing(t, h.proxy, 2)
	server := stubDNS(t, h)

	m := query(t, server, "api.allowed.test.", dnsmessage.TypeA)
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
		t.Fatalf("allowed A: %v, %d answers", m.RCode, len(m.Answers))
	}
	a := netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A)
	if !FakeNet.Contains(a) || m.Answers[0].Header.TTL != dnsTTL {
		t.Errorf("allowed A: %v ttl %d, want an address of %v", a, m.Answers[0].Header.TTL, FakeNet)
	}
	if got, ok := h.proxy.FakeAddr("API.allowed.test"); !ok || got != a {
		t.Errorf("FakeAddr = %v %v, want %v", got, ok, a)
	}
	if m := query(t, server, "API.Allowed.Test.", dnsmessage.TypeA); len(m.Answers) != 1 || netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A) != a {
		t.Errorf("the same name asked again (other case) got another answer: %+v", m.Answers)
	}
	if m := query(t, server, "api.allowed.test.", dnsmessage.TypeAAAA); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
		t.Errorf("allowed AAAA: %v with %d answers, want NOERROR and none", m.RCode, len(m.Answers))
	}
	if m := query(t, server, "exact.test.", dnsmessage.TypeA); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
		t.Errorf("a name allowed on one port: %v", m.RCode)
	}
	// Refused names, and a DNS tunnel's queries: NXDOMAIN at once,
	// never looked up nor forwarded.
	for _, q := range []struct {
		name string
		typ  dnsmessage.Type
	}{
		{"evil.test.", dnsmessage.TypeA},
		{"evil.test.", dnsmessage.TypeAAAA},
		{"bad.allowed.test.", dnsmessage.TypeA},
		{"c2VjcmV0IGRhdGE.tunnel.evil.test.", dnsmessage.TypeTXT},
		{"allowed.test.", dnsmessage.TypeA}, // a wildcard's apex
	} {
		start := time.Now()
		if m := query(t, server, q.name, q.typ); m.RCode != dnsmessage.RCodeNameError || len(m.Answers) != 0 {
			t.Errorf("%s %v: %v, want NXDOMAIN", q.name, q.typ, m.RCode)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v", q.name, d)
		}
	}
	// The sandbox's own host name, and reverse lookups: refused, audited,
	// kept out of the summary.
	for _, name := range []string{"tent.", "1.0.0.127.in-addr.arpa."} {
		if m := query(t, server, name, dnsmessage.TypeA); m.RCode != dnsmessage.RCodeNameError {
			t.Errorf("%s: %v, want NXDOMAIN", name, m.RCode)
		}
	}
	for _, name := range []string{"api.allowed.test", "evil.test", "bad.allowed.test", "c2VjcmV0IGRhdGE.tunnel.evil.test", "tent"} {
		if n := h.res.count(name); n != 0 {
			t.Errorf("%s was resolved %d times", name, n)
		}
	}
	if s := Summary(h.proxy.Denied()); !strings.Contains(s, "evil.test (not allowed, 2 times)") || !strings.Contains(s, "bad.allowed.test (denied by rule)") || strings.Contains(s, "tent") || strings.Contains(s, "arpa") {
		t.Errorf("summary %q", s)
	}
	var sawDNS bool
	for _, r := range h.audit.records(t) {
		if r.Proto == "dns" && r.Host == "evil.test" && r.Verdict == VerdictDeny && r.Reason == ReasonNotAllowed {
			sawDNS = true
		}
	}
	if !sawDNS {
		t.Error("no audit record of the refused name")
	}

	// Go's own resolver, pointed at the stub, sees the same.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", server)
	}}
	addrs, err := r.LookupHost(context.Background(), "api.allowed.test")
	if err != nil || !slices.Equal(addrs, []string{a.String()}) {
		t.Errorf("Go resolver: %v %v, want [%v]", addrs, err, a)
	}
	_, err = r.LookupHost(context.Background(), "evil.test")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("Go resolver on a refused name: %v, want not found", err)
	}

	// A rule removed: the name is refused from the next query on; its
	// address keeps its meaning.
	h.setPolicy([]string{"other.test"}, nil)
	if m := query(t, server, "api.allowed.test.", dnsmessage.TypeA); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("after the rule was removed: %v, want NXDOMAIN", m.RCode)
	}
	if got, _ := h.proxy.FakeAddr("api.allowed.test"); got != a {
		t.Errorf("the address changed to %v", got)
	}
}

// transparentListener serves h's proxy's transparent catcher on a
// loopback listener and returns its port.
func transparentListener(t *testing.T, h *harness) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.proxy.ServeTransparent(l) }()
	t.Cleanup(func() {
		h.proxy.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeTransparent: %v", err)
		}
	})
	return port(t, l.Addr().String())
}

func TestTransparentConnections(t *testing.T) {
	echoPort := tcpServer(t, echo)
	h := newHarness(t, nil, nil)
	catch := transparentListener(t, h)
	waitServing(t, h.proxy, 3)
	dest := "127.0.0.1:" + strconv.Itoa(catch)
	// The catcher's address is the destination: the proxy dials it, and
	// the harness sends that dial to the echo server.
	h.mu.Lock()
	h.remap[dest] = "127.0.0.1:" + strconv.Itoa(echoPort)
	h.mu.Unlock()
	h.setPolicy([]string{dest}, nil)

	c, err := net.Dial("tcp", dest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	n, _ := c.Read(buf)
	c.Close()
	if string(buf[:n]) != "ping" {
		t.Fatalf("through the catcher: %q, want the echo", buf[:n])
	}
	if d := h.dialed(); !slices.Equal(d, []string{dest}) {
		t.Errorf("dialled %v, want [%s]", d, dest)
	}

	// The policy changes: the next connection is reset (which a client
	// may see at connect already), and counted.
	h.setPolicy([]string{"127.0.0.1:1"}, nil)
	c, err = net.Dial("tcp", dest)
	if err == nil {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(buf)
		c.Close()
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the rule was removed: %v, want ECONNRESET", err)
	}
	if s := Summary(h.proxy.Denied()); s != "blocked 1 connection: "+dest+" (not allowed)" {
		t.Errorf("summary %q", s)
	}
	var allow, deny bool
	for _, r := range h.audit.records(t) {
		allow = allow || r.Proto == "transparent" && r.Verdict == VerdictAllow && r.Event == EventDecision
		deny = deny || r.Proto == "transparent" && r.Verdict == VerdictDeny
	}
	if !allow || !deny {
		t.Errorf("audit: allow recorded %v, deny recorded %v", allow, deny)
	}
}

func TestTransparentDestination(t *testing.T) {
	// No serving needed: a bare proxy (the harness's serve loops might
	// not have started when so short a test closes it).
	h := &harness{proxy: NewProxy(ProxyConfig{Policy: mustCompile(t, []string{"api.allowed.test"}, nil), Resolver: newResolver()})}
	defer h.proxy.Close()
	a, _ := h.proxy.fake.lookup("api.allowed.test")
	if host, port, _ := h.proxy.destination(&net.TCPAddr{IP: a.AsSlice(), Port: 443}); host != "api.allowed.test" || port != 443 {
		t.Errorf("a fake address maps to %s:%d", host, port)
	}
	mapped := netip.AddrFrom16(a.As16()) // as a dual-stack socket reports it
	if host, _, _ := h.proxy.destination(&net.TCPAddr{IP: mapped.AsSlice(), Port: 443}); host != "api.allowed.test" {
		t.Errorf("an IPv4-mapped fake address maps to %s", host)
	}
	// An address of the range that no name owns stands for itself, a
	// private address no rule names.
	other := netip.MustParseAddr("198.19.7.7")
	if other == a {
		other = netip.MustParseAddr("198.19.7.8")
	}
	host, port, _ := h.proxy.destination(&net.TCPAddr{IP: other.AsSlice(), Port: 443})
	if host != other.String() {
		t.Fatalf("unowned address maps to %s", host)
	}
	if _, err := h.proxy.open(context.Background(), "transparent", host, port); err == nil || !strings.Contains(err.Error(), ReasonNotAllowed) {
		t.Errorf("unowned fake address: %v, want not allowed", err)
	}
}

// A proxy that takes over a sandbox (a supervisor's hand-off) keeps the
// meaning of every address the previous one gave; it accepts nothing
// outside the fake range or twice.
func TestFakeNamesCarryOver(t *testing.T) {
	a := NewProxy(ProxyConfig{Policy: mustCompile(t, []string{"*.example.com"}, nil)})
	defer a.Close()
	first, _ := a.fake.lookup("one.example.com")
	second, _ := a.fake.lookup("two.example.com")
	names := a.FakeNames()
	if len(names) != 2 || names[0].Name != "one.example.com" || names[1].Addr != second {
		t.Fatalf("FakeNames = %v", names)
	}
	bad := []FakeName{
		{Name: "outside.example.com", Addr: netip.MustParseAddr("10.0.0.1")},
		{Name: "squat.example.com", Addr: first},
		{Name: "bad name", Addr: netip.MustParseAddr("198.18.0.9")},
	}
	b := NewProxy(ProxyConfig{FakeNames: append(names, bad...)})
	defer b.Close()
	for _, n := range names {
		if got, ok := b.FakeAddr(n.Name); !ok || got != n.Addr {
			t.Errorf("after the take-over %s is %v %v, want %v", n.Name, got, ok, n.Addr)
		}
	}
	if host, _, _ := b.destination(&net.TCPAddr{IP: first.AsSlice(), Port: 443}); host != "one.example.com" {
		t.Errorf("%v now means %q", first, host)
	}
	for _, n := range bad {
		if _, ok := b.FakeAddr(n.Name); ok {
			t.Errorf("restored %v", n)
		}
	}
}

// TestStubDNSAnswersHostsFileNames: a name the host's hosts file lists
// with an address an IP or CIDR rule allows is answered with that
// address (as the host's resolver, and a program inside reading the
// file, find it), read from the file only, never looked up; a name it
// lists with an address no rule allows, or one a deny rule covers, is
// NXDOMAIN as before.
func TestStubDNSAnswersHostsFileNames(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte(`# the test's hosts file
10.9.8.7	db.internal DB2.Internal   # two names
192.0.2.5 pg.internal
192.0.2.6 pg.internal
192.0.2.66 denied.internal
10.1.1.1 other.internal
::1 v6only.internal
198.18.0.1 fake.internal
not-an-address broken.internal
`), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, []string{"10.9.8.7", "192.0.2.0/24:5432", "198.18.0.0/15", "allowed.test"}, []string{"192.0.2.66"},
		func(c *ProxyConfig) { c.HostsFile = hosts })
	waitServing(t, h.proxy, 2)
	server := stubDNS(t, h)
	answers := func(m dnsmessage.Message) []string {
		var s []string
		for _, a := range m.Answers {
			s = append(s, netip.AddrFrom4(a.Body.(*dnsmessage.AResource).A).String())
		}
		return s
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"db.internal.", []string{"10.9.8.7"}},
		{"db2.internal.", []string{"10.9.8.7"}},
		{"pg.internal.", []string{"192.0.2.5", "192.0.2.6"}}, // a rule with a port: caught there
	} {
		if m := query(t, server, c.name, dnsmessage.TypeA); m.RCode != dnsmessage.RCodeSuccess || !slices.Equal(answers(m), c.want) {
			t.Errorf("%s A: %v %v, want %v", c.name, m.RCode, answers(m), c.want)
		}
		if m := query(t, server, c.name, dnsmessage.TypeAAAA); m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
			t.Errorf("%s AAAA: %v with %d answers, want NOERROR and none", c.name, m.RCode, len(m.Answers))
		}
	}
	for _, name := range []string{"denied.internal.", "other.internal.", "v6only.internal.", "fake.internal.", "broken.internal.", "absent.internal."} {
		if m := query(t, server, name, dnsmessage.TypeA); m.RCode != dnsmessage.RCodeNameError {
			t.Errorf("%s: %v %v, want NXDOMAIN", name, m.RCode, answers(m))
		}
	}
	if m := query(t, server, "allowed.test.", dnsmessage.TypeA); len(m.Answers) != 1 || !FakeNet.Contains(netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A)) {
		t.Errorf("a name a name rule allows: %v", answers(m))
	}
	for _, name := range []string{"db.internal", "pg.internal", "other.internal", "absent.internal"} {
		if n := h.res.count(name); n != 0 {
			t.Errorf("%s was resolved %d times", name, n)
		}
	}
	// Go's resolver, pointed at the stub, finds what it finds in the file.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", server)
	}}
	if addrs, err := r.LookupHost(context.Background(), "db.internal"); err != nil || !slices.Equal(addrs, []string{"10.9.8.7"}) {
		t.Errorf("Go resolver: %v %v", addrs, err)
	}
	var sawAllow bool
	for _, rec := range h.audit.records(t) {
		if rec.Proto == "dns" && rec.Host == "db.internal" && rec.Verdict == VerdictAllow && rec.Rule == "10.9.8.7" && rec.Addr == "10.9.8.7" {
			sawAllow = true
		}
	}
	if !sawAllow {
		t.Error("no audit record of the answer from the hosts file")
	}
}
