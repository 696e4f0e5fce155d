//go:build linux && amd64

package seccomp

import (
	_ "embed" // the precompiled default program
)

//go:generate go run gen_default.go

//go:embed default_amd64.bpf
var defaultAMD64 []byte

// DefaultProgram returns [Default] compiled for the native architecture.
// On x86-64 it is precompiled at build time (go generate), which saves
// every sandbox start the libseccomp compilation; elsewhere it is compiled
// on first use.
func DefaultProgram() (Program, error) { return UnmarshalProgram(defaultAMD64) }
