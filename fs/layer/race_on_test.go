//go:build race

package layer

// raceEnabled: the race detector multiplies a process's memory, so the
// memory bounds are not checked under it.
const raceEnabled = true
