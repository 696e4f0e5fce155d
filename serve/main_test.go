package serve

import (
	"os"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// The test binary is the sandboxes' init too: the Local backend of the
// SDK test re-executes it, which sandbox.Init runs.
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(sandboxtest.Run(m))
}

// The helpers the sandbox tests share.
var (
	handleOf = sandboxtest.Handle
	infoOf   = sandboxtest.Info
)
