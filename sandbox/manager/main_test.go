package manager_test

import (
	"os"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestMain lets the test binary serve as a sandbox's init (see
// sandbox.Init): the Local backend starts sandboxes by re-executing it.
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}
