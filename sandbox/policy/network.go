package policy

import (
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// The network modes of a [sandbox.NetworkPolicy] (netpolicy's Mode; see
// [ParseNet] for their textual form).
const (
	// NetNone: the sandbox has its own network namespace with only
	// loopback.
	NetNone = netpolicy.None
	// NetLimited: as NetNone, plus tent's host-side proxy, which lets
	// through only what the policy's rules allow.
	NetLimited = netpolicy.Limited
	// NetHost: the sandbox shares the host's network.
	NetHost = netpolicy.Host
)

// NetworkSecret is one credential of a [sandbox.NetworkPolicy]'s Secrets
// (netpolicy.Secret): the hosts it may be sent to and where the proxy
// puts it (a placeholder the sandbox writes, or a header it sets).
type NetworkSecret = netpolicy.Secret

// Denial is one connection a network policy refused (netpolicy.Denial):
// an entry of a [sandbox.Report]'s or an exec result's NetworkDenied.
type Denial = netpolicy.Denial

// Rule is one parsed host rule of a network policy (netpolicy.Rule): a
// host name, a wildcard name, an IP address or a CIDR prefix, with an
// optional port.
type Rule = netpolicy.Rule

// ParseRule parses and checks a host rule as a policy's AllowedHosts and
// DeniedHosts take it (netpolicy.ParseRule); its error says why a
// pattern is refused, without repeating it.
func ParseRule(pattern string) (Rule, error) { return netpolicy.ParseRule(pattern) }

// CheckNetwork checks p as the sandbox's proxy would compile it, without
// making anything: its rules, and its secrets' names, hosts, placements
// and templates. Its error is the proxy's, for the caller to prefix with
// the field it came from.
func CheckNetwork(p sandbox.NetworkPolicy) error {
	_, err := netpolicy.Compile(p)
	return err
}
