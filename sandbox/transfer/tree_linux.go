package transfer

import "github.com/tent-sandbox/tent/fs/layer"

// The host side's tree operations, for a host directory whose contents a
// sandbox controls (a volume it mounts, a layer it wrote): nothing in it
// is followed, and every walk is bounded. They are package fs/layer's.

// MaxDepth bounds how many directory levels below its starting point
// [RemoveTree] and [RemoveBeneath] walk; a deeper tree fails with an
// error that wraps [ErrTooDeep] and names the path where the bound was
// hit.
const MaxDepth = layer.MaxDepth

// ErrTooDeep is wrapped by the errors of walks that reach MaxDepth.
var ErrTooDeep = layer.ErrTooDeep

// RemoveTree removes dir and everything beneath it without following
// any symlink inside it, descriptor-relative (up to MaxDepth levels),
// making directories searchable and writable as needed. A missing dir is
// not an error.
func RemoveTree(dir string) error { return layer.RemoveTree(dir) }

// RemoveBeneath is RemoveTree for name in the directory parent, a
// descriptor the caller resolved safely (a volume a sandbox still writes
// to). A missing name is not an error; a tree deeper than MaxDepth wraps
// ErrTooDeep.
func RemoveBeneath(parent int, name string) error { return layer.RemoveBeneath(parent, name) }

// ChmodNoFollow sets the mode of name in the directory parent without
// following a symlink (a link is refused with ELOOP), on any kernel.
func ChmodNoFollow(parent int, name string, mode uint32) error {
	return layer.ChmodNoFollow(parent, name, mode)
}
