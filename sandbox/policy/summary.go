package policy

import "github.com/tent-sandbox/tent/netpolicy"

// DeniedSummary renders the connections a network policy refused (a
// [sandbox.Report]'s or an exec result's NetworkDenied) as one line for a
// person or an agent, e.g. "blocked 3 connections: evil.example:443 (not
// allowed, 2 times), 10.0.0.1:80 (private address)"; "" when d records
// none. The line is bounded and printable ASCII whatever d holds (see
// netpolicy.Summary, which it is).
func DeniedSummary(d []netpolicy.Denial) string { return netpolicy.Summary(d) }
