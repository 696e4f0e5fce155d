//go:build !linux

package hostcheck

import (
	"context"
	"runtime"

	"github.com/tent-sandbox/tent/cgroups"
)

// notLinux is every probe's result outside Linux.
func notLinux() Result {
	return Result{Status: Missing, Detail: "sandboxes need Linux, not " + runtime.GOOS}
}

// ProbeUserNS reports [Missing] outside Linux.
func ProbeUserNS(context.Context, string) Result { return notLinux() }

// ProbeLandlock reports [Missing] outside Linux.
func ProbeLandlock(string) Result { return notLinux() }

// ProbeSeccomp reports [Missing] outside Linux.
func ProbeSeccomp(string) Result { return notLinux() }

// ProbeKernel reports [Missing] outside Linux.
func ProbeKernel() Result { return notLinux() }

// ProbeCgroups reports [Missing] outside Linux.
func ProbeCgroups(string, func(*cgroups.Host) (cgroups.Version, error)) Result { return notLinux() }

// ProbeOverlay reports [Missing] outside Linux.
func ProbeOverlay(context.Context) Result { return notLinux() }

// ProbeIDMap reports [Missing] outside Linux.
func ProbeIDMap(context.Context) Result { return notLinux() }
