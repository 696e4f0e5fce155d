// Package e2bsdk installs the official E2B JavaScript SDK for tests that
// drive `tent serve` with it (the serve package's SDK test, the README's
// example): one pinned version, installed with npm once and kept under
// the user's cache directory (see package npmtest).
package e2bsdk

import "github.com/tent-sandbox/tent/internal/npmtest"

// Version is the e2b npm package the tests use.
const Version = "2.51.0"

// ErrNoNode is returned by Install when node or npm is missing, unless
// $TENT_REQUIRE_SDK is set (CI sets it): then the missing tool is an
// error like any other, so that the SDK tests cannot skip there.
var ErrNoNode = npmtest.ErrNoNode

// Install returns node's path and a node_modules directory holding e2b at
// Version (see npmtest.Install).
func Install(scratch string) (node, modules string, err error) {
	return npmtest.Install(scratch, "e2b@"+Version)
}

// CodeInterpreterVersion is the @e2b/code-interpreter npm package the
// tests use, installed beside e2b at Version (which its range admits).
const CodeInterpreterVersion = "2.8.0"

// InstallCodeInterpreter returns node's path and a node_modules directory
// holding @e2b/code-interpreter at CodeInterpreterVersion over e2b at
// Version (see npmtest.Install).
func InstallCodeInterpreter(scratch string) (node, modules string, err error) {
	return npmtest.Install(scratch, "e2b@"+Version, "@e2b/code-interpreter@"+CodeInterpreterVersion)
}
