//go:build !cgo

package namespaces

// holderAvailable is false without cgo: the idle holder is C code that
// must run before the Go runtime. An idle init then only trims its memory
// (internal/memtrim).
const holderAvailable = false

// processStartNS is unknown without cgo: no code runs before the Go
// runtime.
func processStartNS() int64 { return 0 }

const holderArg0 = IdleArg0

const supervisorHolderArg0 = IdleSupervisorArg0
const holderWake = `{"type":"wake"}`
