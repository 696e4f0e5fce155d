package supervised

import (
	"github.com/tent-sandbox/tent/sandbox"
)

const (
	// MaxDetached is how many detached commands (sandbox.Process) a
	// sandbox keeps records of, running and finished.
	MaxDetached = 64
	// MaxDetachedOutput is how much of each output stream of a detached
	// command is kept for the next reader; older output is dropped (and
	// counted).
	MaxDetachedOutput = 1 << 20
)

// ProcessInfo describes a detached command: a [sandbox.Process] of the
// sandbox (see [Sandbox.Start]).
type ProcessInfo = sandbox.ProcessInfo

// ErrNoProcess is returned for a pid that names no detached command of
// the sandbox, or one that has already exited where a running one is
// needed (a signal); it is [sandbox.ErrNoProcess].
var ErrNoProcess = sandbox.ErrNoProcess
