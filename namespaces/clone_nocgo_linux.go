//go:build !cgo || !amd64

package namespaces

import "errors"

// fastCloneAvailable is false without cgo on amd64: inits start through
// os/exec.
const fastCloneAvailable = false

func cloneShared(string, []string, []string, [4]int, uintptr, int, []int, bool, uint32, uint32, func(int) error) (int, bool, error) {
	return 0, false, errors.New("shared-memory clone unavailable in this build")
}
