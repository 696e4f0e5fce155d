// Package reexec is the registry of the program modes a tent binary can be
// started in by tent itself, chosen by argv[0] (see the re-exec contract in
// package sandbox's documentation). Packages register their modes in their
// init functions — registering never runs anything — and sandbox.Init
// runs the mode argv[0] names, if any, and exits with its status.
package reexec

import (
	"os"
	"sync"
)

var (
	mu    sync.Mutex
	modes = map[string]func() int{}
)

// Register makes main the program when argv[0] is arg0. Registering a
// name twice panics.
func Register(arg0 string, main func() int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := modes[arg0]; dup {
		panic("reexec: mode " + arg0 + " registered twice")
	}
	modes[arg0] = main
}

// Mode returns the main function of the mode argv[0] names, if any.
func Mode() (func() int, bool) {
	if len(os.Args) == 0 {
		return nil, false
	}
	mu.Lock()
	defer mu.Unlock()
	m, ok := modes[os.Args[0]]
	return m, ok
}

// Run runs the mode argv[0] names and exits with its status; in any other
// process it returns at once.
func Run() {
	if m, ok := Mode(); ok {
		os.Exit(m())
	}
}
