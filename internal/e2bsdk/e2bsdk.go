// Package e2bsdk installs the official E2B SDKs for tests that drive
// `tent serve` with them (the serve package's SDK tests, the README's
// examples): pinned versions, installed once with npm (JavaScript, see
// package npmtest) or pip (Python, see package piptest) and kept under
// the user's cache directory.
package e2bsdk

import (
	"github.com/tent-sandbox/tent/internal/npmtest"
	"github.com/tent-sandbox/tent/internal/piptest"
)

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

// PythonPackages are the Python SDK's pinned packages: e2b-code-interpreter
// over the e2b it was released with.
var PythonPackages = []string{"e2b-code-interpreter==2.11.5", "e2b==2.63.0"}

// ErrNoPython is returned by InstallPython when python3 or its venv
// module is missing, unless $TENT_REQUIRE_SDK is set.
var ErrNoPython = piptest.ErrNoPython

// InstallPython returns the python of a virtual environment holding
// PythonPackages (see piptest.Install).
func InstallPython(scratch string) (python string, err error) {
	return piptest.Install(scratch, PythonPackages...)
}
