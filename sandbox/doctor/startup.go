package doctor

import (
	"time"

	"github.com/tent-sandbox/tent/namespaces"
)

// ProcessStartAge is how long ago this process's C constructors ran,
// before the Go runtime started, on the clock of a sandbox's start phases
// (CLOCK_MONOTONIC): called first thing in main, the time the program's
// exec, the Go runtime's start and every package initialiser took (tent
// -v logs it). It is 0 when unknown: in builds without cgo, and outside
// Linux.
func ProcessStartAge() time.Duration {
	return namespaces.Between(namespaces.ProcessStart(), namespaces.Monotonic())
}
