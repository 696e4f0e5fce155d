//go:build !linux

package namespaces

// MaybeRunInit returns at once: outside Linux no process is a sandbox's
// init or helper, and none is started.
func MaybeRunInit() {}

// Monotonic is 0 outside Linux: no sandbox starts there.
func Monotonic() int64 { return 0 }

// ProcessStart is 0 outside Linux.
func ProcessStart() int64 { return 0 }
