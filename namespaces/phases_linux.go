package namespaces

import (
	"time"

	"golang.org/x/sys/unix"
)

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

// Monotonic is CLOCK_MONOTONIC in nanoseconds, the clock of [Phases].
func Monotonic() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// ProcessStart is the [Monotonic] time at which this process's C
// constructors ran, before the Go runtime started; 0 in builds without
// cgo.
func ProcessStart() int64 { return processStartNS() }

// Between is the time from a to b, or 0 when either is not known.
func Between(a, b int64) time.Duration {
	if a == 0 || b == 0 {
		return 0
	}
	return time.Duration(b - a)
}

// stamps and phasesOf carry Phases in the init's "started" or "ready"
// message.
func (p Phases) stamps() []int64 { return []int64{p.Exec, p.Entry, p.Config, p.Root, p.Started} }

func phasesOf(s []int64) Phases {
	var p Phases
	for i, v := range s {
		switch i {
		case 0:
			p.Exec = v
		case 1:
			p.Entry = v
		case 2:
			p.Config = v
		case 3:
			p.Root = v
		case 4:
			p.Started = v
		}
	}
	return p
}
