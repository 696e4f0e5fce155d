// Package testhooks points the proxies of the sandboxes a test starts at
// the test's own origin: the roots its certificate chains to, and a
// resolver for its names. Only tests set them; a test binary that is also
// the supervisors' program (package supervised) sets them in its
// TestMain, in the supervisors too.
package testhooks

import (
	"crypto/x509"

	"github.com/tent-sandbox/tent/netpolicy"
)

var (
	// UpstreamRoots, when set, are the roots the proxy verifies
	// intercepted hosts against instead of the host's.
	UpstreamRoots *x509.CertPool
	// Resolver, when set, resolves names for a sandbox provisioned
	// without a resolver of its own.
	Resolver netpolicy.Resolver
)
