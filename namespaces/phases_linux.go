package namespaces

import "golang.org/x/sys/unix"

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

// stamps and phasesOf carry Phases in the init's "started" or "ready"
// message.
func (p Phases) stamps() []int64 { return []int64{p.Exec, p.Entry, p.Config, p.Root, p.Started} }

func phasesOf(s []int64) Phases {
	var p Phases
	for i, f := range []*int64{&p.Exec, &p.Entry, &p.Config, &p.Root, &p.Started} {
		if i < len(s) {
			*f = s[i]
		}
	}
	return p
}
