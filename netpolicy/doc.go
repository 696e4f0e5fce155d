// Package netpolicy owns tent's network policy: the modes a sandbox runs
// with, the host rules of limited mode, and the host-side proxy that
// enforces them.
//
// # Modes
//
// [None] (the zero value) gives the sandbox its own network namespace with
// only loopback. [Limited] does the same, plus two listeners inside the
// sandbox (an HTTP proxy port and a SOCKS5 port) whose connections are
// served on the host by a [Proxy]. [Host] shares the host's network and can
// only be chosen when a sandbox is created. A program that ignores the
// proxy variables has no network at all in limited mode: direct TCP, UDP
// and DNS have nowhere to go.
//
// # Rules
//
// A [Policy] lists allowed and denied host patterns; [ParseRule] documents
// the syntax: exact names, "*.example.com" (subdomains only, never the
// apex), IP addresses and CIDR prefixes, each with an optional port.
// Wildcards over a public suffix ("*.com", "*.co.uk", "*.github.io") or a
// single label ("*.test") are rejected, as are "*", URLs and paths. [Compile]
// validates a policy into a [Compiled] one, which answers two questions:
//
//   - [Compiled.CheckName]: may the sandbox reach this name or IP literal on
//     this port? Asked before anything is resolved. Deny rules win; name
//     rules match names and IP rules match IP literals, never the other way.
//   - [Compiled.CheckAddr]: may it reach this resolved address? Private
//     addresses (see [IsPrivate]: loopback, RFC 1918, CGNAT, link-local,
//     unique local, cloud metadata...) are refused unless an IP or CIDR
//     allow rule covers them.
//
// Both are pure functions of the policy, so most of the package is tested
// without a network.
//
// # Proxy
//
// [Proxy] serves listeners the caller hands it: [Proxy.ServeHTTP] for plain
// HTTP forwarding and CONNECT, [Proxy.ServeSOCKS5] for SOCKS5 CONNECT. In
// tent those are the listening sockets created inside the sandbox's network
// namespace and passed to the host, so the proxy has no listener on the
// host that anything else could reach. For every destination the proxy
//
//  1. checks the name against the rules (a refused name is never looked up);
//  2. resolves an allowed name on the host, with [ProxyConfig.Resolver];
//  3. checks every resolved address and drops those refused;
//  4. connects to an address that passed, as "ip:port", so nothing is
//     resolved twice and DNS rebinding cannot swap the address.
//
// Refusals are explicit: HTTP 403 with a one-line body and the header
// "X-Tent-Denied: <reason>; rule=<pattern or none>", or SOCKS5 reply 0x02
// (connection not allowed by ruleset). [Proxy.SetPolicy] swaps the policy
// at run time; new connections and new HTTP requests follow it at once.
// Tunnels copy with splice(2) when both ends are TCP sockets and propagate
// half-closes.
//
// # Audit
//
// With [ProxyConfig.Audit] set, every decision and every closed upstream
// connection is written as one JSON line ([AuditRecord]).
// [Proxy.Denied] and [Summary] condense the refusals into the one line tent
// prints after a run, such as
// "blocked 2 connections: evil.example:443 (not allowed), 10.0.0.1:80 (private address)".
package netpolicy
