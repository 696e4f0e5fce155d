package netpolicy

import "net/netip"

// privateRanges are the destinations the proxy refuses unless an IP or CIDR
// allow rule names them: everything that is not a globally routed unicast
// address, following the IANA special-purpose registries.
var privateRanges = []netip.Prefix{
	// IPv4
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),         // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),      // CGNAT shared space (RFC 6598), incl. Alibaba metadata 100.100.100.200
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, incl. cloud metadata 169.254.169.254
	netip.MustParsePrefix("172.16.0.0/12"),      // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),       // documentation
	netip.MustParsePrefix("192.88.99.0/24"),     // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),     // RFC 1918
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"),    // documentation
	netip.MustParsePrefix("203.0.113.0/24"),     // documentation
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, incl. broadcast 255.255.255.255
	netip.MustParsePrefix("::/96"),              // unspecified, loopback, deprecated IPv4-compatible
	netip.MustParsePrefix("::ffff:0:0:0/96"),    // IPv4-translated (RFC 2765)
	netip.MustParsePrefix("64:ff9b:1::/48"),     // local-use NAT64 (RFC 8215)
	netip.MustParsePrefix("100::/64"),           // discard-only
	netip.MustParsePrefix("2001::/23"),          // IETF protocol assignments, incl. Teredo 2001::/32
	netip.MustParsePrefix("2001:db8::/32"),      // documentation
	netip.MustParsePrefix("3fff::/20"),          // documentation
	netip.MustParsePrefix("fc00::/7"),           // unique local, incl. AWS metadata fd00:ec2::254
	netip.MustParsePrefix("fe80::/10"),          // link-local
	netip.MustParsePrefix("fec0::/10"),          // deprecated site-local
	netip.MustParsePrefix("ff00::/8"),           // multicast
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS IMDS over IPv6 (inside fc00::/7; named for clarity)
	netip.MustParsePrefix("169.254.169.254/32"), // cloud metadata (inside 169.254/16; named for clarity)
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // well-known NAT64: the last 32 bits are IPv4
	sixToFour = netip.MustParsePrefix("2002::/16")    // 6to4: bits 16-47 are IPv4
)

// IsPrivate reports whether the proxy treats ip as a private destination,
// one it refuses unless an IP or CIDR allow rule covers it: loopback
// (127.0.0.0/8, ::1), RFC 1918, CGNAT (100.64.0.0/10), link-local
// (169.254.0.0/16, fe80::/10), unique local (fc00::/7), the cloud
// metadata addresses 169.254.169.254 and fd00:ec2::254, unspecified,
// multicast, broadcast, reserved, documentation and benchmarking ranges,
// and IPv6 forms that carry an IPv4 address (IPv4-mapped, NAT64
// 64:ff9b::/96 and 6to4 2002::/16) when the IPv4 address they carry is
// private. An invalid address is private.
func IsPrivate(ip netip.Addr) bool {
	if !ip.IsValid() {
		return true
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			return IsPrivate(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			return IsPrivate(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, p := range privateRanges {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
