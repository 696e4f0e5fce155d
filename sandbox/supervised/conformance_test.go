package supervised

import (
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/backendtest"
)

// The supervised backend passes the Backend conformance suite.
func TestBackendConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) sandbox.Backend { return open(t) })
}
