// Package handoff joins package sandbox to package supervised for the one
// thing the supervisor needs of a sandbox's insides: handing a live
// sandbox from one process image to the next (an idle supervisor gives
// way to its idle holder, which execs the supervisor again when a request
// comes). Package sandbox installs the functions below in its init;
// package supervised calls them. The values are *sandbox.Sandbox and
// sandbox.ProvisionOptions, typed any because this package cannot import
// sandbox (sandbox imports it).
package handoff

// Resumed is what a resumed supervisor learns from the state its
// predecessor left.
type Resumed struct {
	// Store and ID name the sandbox's state directory and id.
	Store, ID string
	// Listener is the supervisor's listening socket's descriptor.
	Listener int
}

var (
	// Quiet reports whether the sandbox has nothing in flight that a
	// hand-off would cut.
	Quiet func(sb any) bool
	// HandOff replaces this process with the supervisor's idle holder,
	// which watches the sandbox and listener (a descriptor), and execs
	// argv (the holder adds the state descriptor and the waking signal).
	// It returns only when that failed.
	HandOff func(sb any, store, id string, listener int, argv []string) error
	// Adopt rebuilds the sandbox from the state descriptor a holder
	// passed; on failure it has ended the sandbox (init, cgroup, layers).
	Adopt func(stateFD string, opts any) (sb any, r Resumed, err error)
	// Ended says why a sandbox that ended on its own ended.
	Ended func(sb any) string
	// RemoveSnapshotTemps removes the temporary directories, in the
	// snapshots directory dir, of snapshots sandbox id was taking when
	// its supervisor died.
	RemoveSnapshotTemps func(dir, id string)
)
