//go:build race

package fs

// raceEnabled: the race detector multiplies a process's memory, so the
// memory bounds are not checked under it.
const raceEnabled = true
