//go:build linux

package transfer

import (
	"os"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}
