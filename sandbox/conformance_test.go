//go:build linux

package sandbox_test

import (
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/backendtest"
)

// Local passes the Backend conformance suite.
func TestLocalBackendConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) sandbox.Backend { return newLocal(t, sandbox.LocalOptions{}) })
}
