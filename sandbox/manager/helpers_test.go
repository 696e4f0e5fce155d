package manager_test

import "github.com/tent-sandbox/tent/internal/sandboxtest"

// The helpers the sandbox and supervised tests share.
var (
	newLocal        = sandboxtest.NewLocal
	eventually      = sandboxtest.Eventually
	assertGone      = sandboxtest.AssertGone
	pidAlive        = sandboxtest.PIDAlive
	assertNoProcess = sandboxtest.AssertNoProcess
	infoOf          = sandboxtest.Info
)
