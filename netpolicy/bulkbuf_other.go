//go:build !linux

package netpolicy

import "errors"

// mapBulk is Linux-only; elsewhere the large buffers come from the Go
// heap.
func mapBulk(int) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapBulk([]byte) {}
