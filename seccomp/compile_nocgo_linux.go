//go:build linux && !cgo

package seccomp

import (
	"errors"
	"fmt"
)

// Compile would turn p into a classic-BPF filter with libseccomp, which
// this build (CGO_ENABLED=0) does not link. It validates p (errors wrap
// ErrInvalidProfile) and otherwise returns an error wrapping
// errors.ErrUnsupported. The built-in programs need no compiler on
// x86-64: see [DefaultProgram] and [GuardProgram].
func Compile(p *Profile) (Program, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("built without cgo: custom seccomp profiles need libseccomp: %w", errors.ErrUnsupported)
}
