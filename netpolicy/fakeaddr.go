package netpolicy

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FakeNet is the range the stub DNS of a transparent sandbox (see
// [Proxy.ServeDNS]) draws its answers from: 198.18.0.0/15, the
// benchmarking range, which no public host uses ([IsPrivate] refuses it,
// so an address of it that no name owns is refused like any private
// address).
var FakeNet = netip.MustParsePrefix("198.18.0.0/15")

// DefaultMaxNames caps the names one proxy gives fake addresses to; the
// stub DNS refuses (REFUSED) names beyond it. Each costs about 150 bytes.
const DefaultMaxNames = 16384

// fakeNames is a proxy's table of fake addresses. An allowed name's
// address comes from a hash of the name (SHA-256, the first 17 bits that
// fall inside FakeNet's host part, excluding its first and last address),
// probing further hashes on a collision, so a name keeps its address from
// one sandbox to the next unless another name claimed it first. Once
// given, an address never changes meaning for the proxy's life: it is
// never reassigned, even after the rule that allowed its name is gone (a
// connection to it is then refused by the policy, by name).
type fakeNames struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	max    int
}

// fakeSize is the number of addresses in FakeNet.
const fakeSize = 1 << (32 - 15)

// lookup returns name's address, giving it one if it has none; false when
// the table is full.
func (f *fakeNames) lookup(name string) (netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.byName[name]; ok {
		return a, true
	}
	if f.byName == nil {
		f.byName, f.byAddr = map[string]netip.Addr{}, map[netip.Addr]string{}
	}
	if len(f.byName) >= f.max {
		return netip.Addr{}, false
	}
	for i := 0; ; i++ {
		a := fakeAddr(name, i)
		if _, taken := f.byAddr[a]; !taken {
			f.byName[name], f.byAddr[a] = a, name
			return a, true
		}
	}
}

// name returns the name that owns a, if any.
func (f *fakeNames) name(a netip.Addr) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.byAddr[a]
	return n, ok
}

// fakeAddr is the i-th candidate address of name.
func fakeAddr(name string, i int) netip.Addr {
	in := name
	if i > 0 {
		in += "\x00" + strconv.Itoa(i)
	}
	sum := sha256.Sum256([]byte(in))
	n := binary.BigEndian.Uint32(sum[:4])%(fakeSize-2) + 1 // neither the first nor the last
	base := FakeNet.Addr().As4()
	v := binary.BigEndian.Uint32(base[:]) + n
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// FakeName is one answer of the stub DNS: a name and the fake address it
// was given (see [Proxy.FakeNames], [ProxyConfig.FakeNames]).
type FakeName struct {
	Name string     `json:"name"`
	Addr netip.Addr `json:"addr"`
}

// restore gives the names their addresses again (a proxy that takes over
// from another); entries that are malformed, outside FakeNet, or that
// collide with one already restored are skipped, as are those past max.
func (f *fakeNames) restore(names []FakeName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byName == nil {
		f.byName, f.byAddr = map[string]netip.Addr{}, map[netip.Addr]string{}
	}
	for _, n := range names {
		name := normalizeHost(n.Name)
		a := n.Addr.Unmap()
		if len(f.byName) >= f.max || checkName(name) != "" || !FakeNet.Contains(a) {
			continue
		}
		if _, dup := f.byName[name]; dup {
			continue
		}
		if _, taken := f.byAddr[a]; taken {
			continue
		}
		f.byName[name], f.byAddr[a] = a, name
	}
}

// FakeNames returns every name the stub DNS gave an address to, with the
// address, sorted by name: what a proxy taking over the same sandbox
// needs ([ProxyConfig.FakeNames]) so that addresses programs have cached
// keep their meaning.
func (p *Proxy) FakeNames() []FakeName {
	p.fake.mu.Lock()
	defer p.fake.mu.Unlock()
	out := make([]FakeName, 0, len(p.fake.byName))
	for n, a := range p.fake.byName {
		out = append(out, FakeName{Name: n, Addr: a})
	}
	slices.SortFunc(out, func(a, b FakeName) int { return strings.Compare(a.Name, b.Name) })
	return out
}
