package namespaces

import "time"

// Phases are the moments a sandbox start reached each step, as
// CLOCK_MONOTONIC nanoseconds (0: not known), which `tent run -v` and
// docs/benchmarks.md use to say where a start's milliseconds go. The
// clock is the host's: an init has no time namespace of its own.
type Phases struct {
	// Exec: the init's C constructors ran (its exec and the C library's
	// start done, the Go runtime not started; cgo builds only).
	Exec int64
	// Entry: the init's own Go code began (the Go runtime started and
	// the package initialisers sorted before package namespaces ran).
	Entry int64
	// Config: the init had its Config.
	Config int64
	// Root: the root filesystem, the network namespace's settings and
	// the proxy listeners were in place.
	Root int64
	// Started: the one-shot command was restricted and exec'd (or a
	// long-lived init was ready).
	Started int64
}

// Between is the time from a to b, or 0 when either is not known.
func Between(a, b int64) time.Duration {
	if a == 0 || b == 0 {
		return 0
	}
	return time.Duration(b - a)
}
