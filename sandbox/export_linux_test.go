package sandbox

import (
	"crypto/x509"

	"github.com/tent-sandbox/tent/sandbox/internal/testhooks"
)

// SetTestUpstreamRoots makes the proxies of sandboxes started from now on
// verify intercepted hosts against pool instead of the host's roots; the
// function it returns restores them. Tests only.
func SetTestUpstreamRoots(pool *x509.CertPool) (restore func()) {
	old := testhooks.UpstreamRoots
	testhooks.UpstreamRoots = pool
	return func() { testhooks.UpstreamRoots = old }
}

// TarEntries calls fn for each entry of a snapshot part (a zstd tar),
// for the external tests. Tests only.
var TarEntries = tarEntries

// MaxPublishedConns is maxPublishedConns, for the external tests.
const MaxPublishedConns = maxPublishedConns
