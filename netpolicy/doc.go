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
// only be chosen when a sandbox is created. Programs that ignore the proxy
// variables are caught transparently (see "Transparent egress").
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
// # Secrets, interception and HTTP rules
//
// A [Secret] binds a credential to hosts: the sandbox's variable holds a
// placeholder ([NewPlaceholder]), and the proxy replaces it with the
// value in the header fields (and, with [Secret.InURL], the path and
// query) of HTTPS requests to those hosts only; elsewhere, and in clear
// text, the placeholder stays and an audit record says so
// ([AuditRecord.Kept]). Responses from a secret's hosts get the
// placeholder back in place of the value, in every byte the proxy relays
// (status line, header names and values, bodies; trailers are dropped)
// and in every form of the value the proxy made or an echo commonly
// makes (percent-encoded, quoted, inside base64); the proxy's own error
// texts never quote those hosts. A host that encodes the value its own
// way can still hand it over. A policy names its secrets; the values are
// in a [SecretSource] ([ProxyConfig.Secrets]) that the proxy asks each
// time a request goes out, and the answer to that request is scrubbed of
// the value it was sent with (and of the values sent before to the same
// hosts): a write to the source rotates a credential from the next
// request on, a name it no longer has revokes it (the request goes out
// with the placeholder as the sandbox wrote it). A header transform
// ([Secret.Header]) may name its value by a [Secret.Template] ("Bearer
// ${NAME}") that the proxy fills from the source per request
// ([FillTemplate]). An allowed host may also be an [HTTPRule]
// ("GET,HEAD api.github.com/repos/org/"): requests there must match a
// rule's methods and path prefix, the path normalised by
// [NormalizePath] first, with no ';' path parameter past the prefix
// ([Compiled.CheckRequest]); others get 403 with the host's rules.
//
// # Interception
//
// Both need to read HTTPS, so the proxy terminates TLS for exactly the
// hosts a secret or an HTTP rule names ([Compiled.Intercepts]), whichever
// way the connection came (CONNECT, SOCKS5, caught transparently); every
// other host keeps an end-to-end tunnel. It presents certificates minted
// by [ProxyConfig.CA], a per-sandbox [CA] whose key stays in memory,
// offers only http/1.1 by ALPN, and connects to the host with TLS
// verified against [ProxyConfig.UpstreamRoots] (the host's roots by
// default); a host that does not verify is refused. On an intercepted
// connection it refuses a TLS server name or Host header naming another
// host ([ReasonHostMismatch]), a request with both Content-Length and
// Transfer-Encoding ([ReasonSmuggling]), protocol upgrades
// ([ReasonUpgrade]) and ambiguous paths on hosts with HTTP rules
// ([ReasonBadPath]), and audits each request with its method and path
// ([EventRequest]). Without a CA, connections to such hosts are refused.
//
// # Transparent egress
//
// One policy engine, several ways in. In tent, a limited sandbox's own
// network namespace has a local default route on lo, so every address is
// its own, and three more kinds of socket are served here:
//
//   - [Proxy.ServeDNS], the stub DNS on UDP port 53 of every address:
//     an allowed name ([Compiled.CheckDNS]) gets a fake address of
//     [FakeNet] derived from a hash of the name and never reassigned;
//     any other name NXDOMAIN, at once, with nothing looked up or
//     forwarded.
//   - [Proxy.ServeTransparent], a listener on every address of one port
//     ([Compiled.CatchPorts]: the ports the allow rules name, and
//     [DefaultCatchPorts] for a rule without one): the accepted
//     connection's local address is the destination, a fake address
//     standing for its name, and from there it is a CONNECT like any
//     other (proto "transparent" in the audit log), refused with a reset.
//
// # Audit
//
// With [ProxyConfig.Audit] set, every decision and every closed upstream
// connection is written as one JSON line ([AuditRecord]).
// [Proxy.Denied] and [Summary] condense the refusals into the one line tent
// prints after a run, such as
// "blocked 2 connections: evil.example:443 (not allowed), 10.0.0.1:80 (private address)".
//
// # Limits
//
// The proxy runs on the host, outside every limit of the sandbox it
// serves, so everything it spends on the sandbox's behalf is capped; each
// cap is a field of [ProxyConfig] whose zero value is the default below
// (negative lifts it):
//
//   - MaxConns, 256 client connections at once (HTTP and SOCKS5). One more
//     is accepted and closed at once, after a 503 on HTTP; refusals are
//     counted in [Proxy.Denied] ([ReasonTooManyConns]) and audited once,
//     plus a count when the proxy closes.
//   - MaxHeaderBytes, 64 KiB of request head (request line and headers),
//     and with it 256 header fields: 431 and the connection closed. The
//     same caps apply to a response head on plain forwarding (502). SOCKS5
//     fields are at most 255 bytes by construction.
//   - HeadTimeout, 30 s to send a complete head (from the accept, or from
//     the first byte of a later request on a kept-alive connection) or
//     the SOCKS5 handshake: 408 and the connection closed. Tunnels and
//     bodies have no deadline.
//   - Host names: a name longer than DNS allows (253 bytes) is refused as
//     an invalid host before any lookup, and records (audit lines,
//     denials, error messages) keep at most 253 bytes of any name, bytes
//     outside [A-Za-z0-9.:_-] written as \xNN.
//   - MaxDenials, 256 distinct destinations in [Proxy.Denied]; refusals of
//     others are counted in one entry per reason. [Summary] is at most
//     [MaxSummaryLen] (2 KiB) whatever it is given.
//   - AuditBytes, 64 MiB of audit log per proxy, after which records are
//     dropped and counted: one record when it starts, one with the count
//     at [Proxy.Close], both within the budget.
//
// Memory follows from these. A connection reading a head holds the line
// being read, the fields parsed so far and two 4 KiB buffers: at most
// 3 × MaxHeaderBytes + 16 KiB, and 70 to 105 KiB in practice with 60 KiB
// of head (TestSlowHeadersAttack, BenchmarkProxySlowHeadersMemory). So
// slow or oversized heads cost at most MaxConns × (3 × MaxHeaderBytes +
// 16 KiB), 52 MiB by default (18 to 26 MiB measured); a tunnel holds two
// 32 KiB buffers from a shared pool (16 MiB for 256 tunnels), and the
// proxy's bulk transfers at most four 8 MiB buffers at once (32 MiB). The
// denial table stays under 100 KiB.
package netpolicy
