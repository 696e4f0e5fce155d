package oci

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestMain makes the test binary a tent binary too: re-executed, it is
// the sandbox's init, the supervisor or the exec helper (sandbox.Init),
// and invoked as tent-runc it speaks runc's command line, as cmd/tent
// does. Tests without TENT_BINARY drive it through a tent-runc symlink
// (tentRunc).
func TestMain(m *testing.M) {
	sandbox.Init()
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == Arg0 {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
