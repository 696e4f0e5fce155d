//go:build linux && !amd64

package seccomp

import "sync"

var compiledDefault = sync.OnceValues(func() (Program, error) { return Compile(Default()) })

// DefaultProgram returns [Default] compiled for the native architecture,
// compiling it on first use (only x86-64 has a precompiled copy).
func DefaultProgram() (Program, error) { return compiledDefault() }

// GuardProgram returns [GuardProfile](g) compiled for the native
// architecture, compiling it on each call (only x86-64 has precompiled
// copies).
func GuardProgram(g Guard) (Program, error) { return Compile(GuardProfile(g)) }
