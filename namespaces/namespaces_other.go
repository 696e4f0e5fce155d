//go:build !linux

package namespaces

// MaybeRunInit returns at once: outside Linux no process is a sandbox's
// init or helper, and none is started.
func MaybeRunInit() {}
