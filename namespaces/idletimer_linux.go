package namespaces

import (
	"time"

	"github.com/tent-sandbox/tent/internal/memtrim"
)

// IdleTimer paces an idle long-lived tent process (a sandbox's init, a
// CLI supervisor): [IdleTrimAfter] after its last activity it trims the
// process's memory (internal/memtrim), and after the hand-off delay it
// says that the process may give way to its idle holder. Call Reset on
// every activity and Fired whenever C delivers. It is not safe for
// concurrent use.
type IdleTimer struct {
	// C delivers when the timer is due.
	C       <-chan time.Time
	t       *time.Timer
	handOff time.Duration // <= 0: never
	trimmed bool
}

// NewIdleTimer returns a running IdleTimer. idleAfter is the hand-off
// delay: 0 means [DefaultIdleAfter], a negative value never (only the
// trim); there is no hand-off either when this build has no holder or
// holder is false (the process has none to give way to).
func NewIdleTimer(idleAfter time.Duration, holder bool) *IdleTimer {
	if idleAfter == 0 {
		idleAfter = DefaultIdleAfter
	}
	if !holder || !holderAvailable {
		idleAfter = -1
	}
	i := &IdleTimer{handOff: idleAfter, t: time.NewTimer(IdleTrimAfter)}
	i.C = i.t.C
	i.Reset()
	return i
}

// Reset restarts both delays: the process was active.
func (i *IdleTimer) Reset() {
	i.trimmed = false
	d := IdleTrimAfter
	if i.handOff > 0 {
		d = min(d, i.handOff)
	}
	i.t.Reset(d)
}

// Stop stops the timer.
func (i *IdleTimer) Stop() { i.t.Stop() }

// Fired handles a delivery of C: it trims when the trim is due, and
// reports whether the hand-off is. busy means that something is in
// flight that a hand-off would cut: the hand-off is then put off by
// another delay.
func (i *IdleTimer) Fired(busy bool) bool {
	if i.handOff <= 0 {
		i.trim()
		return false
	}
	if !i.trimmed && i.handOff > IdleTrimAfter {
		i.trim()
		i.t.Reset(i.handOff - IdleTrimAfter)
		return false
	}
	if busy {
		i.t.Reset(i.handOff)
		return false
	}
	return true
}

// HandOffFailed is called when the hand-off Fired allowed did not
// happen: the process stays, trimmed, and tries again after another
// delay.
func (i *IdleTimer) HandOffFailed() {
	i.trim()
	if i.handOff > 0 {
		i.t.Reset(i.handOff)
	}
}

func (i *IdleTimer) trim() {
	if !i.trimmed {
		_, _ = memtrim.Trim()
		i.trimmed = true
	}
}
