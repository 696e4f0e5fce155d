//go:build linux && amd64

package seccomp

import (
	"embed"
)

//go:generate go run gen_default.go

//go:embed default_amd64.bpf
var defaultAMD64 []byte

// DefaultProgram returns [Default] compiled for the native architecture.
// On x86-64 it is precompiled at build time (go generate), which saves
// every sandbox start the libseccomp compilation; elsewhere it is compiled
// on first use.
func DefaultProgram() (Program, error) { return UnmarshalProgram(defaultAMD64) }

//go:embed guard*_amd64.bpf
var guardsAMD64 embed.FS

// GuardProgram returns [GuardProfile](g) compiled for the native
// architecture. On x86-64 the four guards are precompiled like
// [DefaultProgram], so the reduced tier needs no libseccomp at run time
// (nor cgo); elsewhere they are compiled on each call.
func GuardProgram(g Guard) (Program, error) {
	b, err := guardsAMD64.ReadFile(guardFile(g))
	if err != nil {
		return nil, err
	}
	return UnmarshalProgram(b)
}

// guardFile names g's precompiled program; gen_default.go writes the
// same names.
func guardFile(g Guard) string {
	name := "guard"
	if g.NoNetwork {
		name += "_net"
	}
	if g.NoIPC {
		name += "_ipc"
	}
	return name + "_amd64.bpf"
}
