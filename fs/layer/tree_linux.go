//go:build linux

package layer

import (
	"io"
	"os"

	"github.com/tent-sandbox/tent/fs/internal/tree"
)

// The archives and the descriptor-relative walks are implemented in
// fs/internal/tree, which the in-sandbox file helper (package fs) shares
// with the layers; these are their public names.

// MaxDepth bounds how many directory levels below its starting point the
// tree code (Diff, ApplyChanges, WriteTar, ExtractTar, RemoveTree) walks.
// A deeper tree fails with an error that wraps ErrTooDeep and names the
// path where the bound was hit.
const MaxDepth = tree.MaxDepth

// MaxSparseSegments bounds the data extents a sparse file may have
// (after holes shorter than 64 KiB are merged) to be archived by WriteTar
// and read back by ExtractTar; beyond it the file is refused with an
// error naming it.
const MaxSparseSegments = tree.MaxSparseSegments

// ErrTooDeep is wrapped by the errors of walks that reach MaxDepth.
var ErrTooDeep = tree.ErrTooDeep

// WriteTar archives the contents of dir (not dir itself); see
// WriteTarFrom. dir itself is the caller's path (its last component is
// not followed).
func WriteTar(w io.Writer, dir string) error { return tree.WriteTar(w, dir) }

// WriteTarFrom archives the contents of the open directory dir as a tar
// stream, for a tree a sandbox may change meanwhile: entries are reached
// descriptor-relative, never through a symlink; regular files are opened
// O_NOFOLLOW|O_NONBLOCK, checked by fstat and archived at the size it
// gave, sparse files sparse; mount points' contents are left out. Trees
// deeper than MaxDepth, names longer than 256 KiB and files of more than
// MaxSparseSegments data extents fail with an error naming the path.
func WriteTarFrom(w io.Writer, dir *os.File) error { return tree.WriteTarFrom(w, dir) }

// WriteTarFromExcept is [WriteTarFrom] restricted to dir's own
// filesystem, less what except names: an entry whose relative path
// (slash-separated, no leading slash) except returns true for is left
// out with everything beneath it, and so are files on another
// filesystem than dir (files bound onto it).
func WriteTarFromExcept(w io.Writer, dir *os.File, except func(rel string) bool) error {
	return tree.WriteTarFromExcept(w, dir, except)
}

// ExtractTar unpacks what WriteTar wrote into dir, which must exist,
// reading the archive as hostile input: every entry is a plain relative
// path created descriptor-relative beneath dir, refusing symlinks on the
// way (ELOOP); symlinks are created, never followed; files are created
// anew with their permission bits only, zero runs and sparse maps
// restored as holes. Trees deeper than MaxDepth fail.
func ExtractTar(r io.Reader, dir string) error { return tree.ExtractTar(r, dir) }

// RemoveTree removes dir and everything beneath it without following
// any symlink inside it, descriptor-relative (up to MaxDepth levels),
// making directories searchable and writable as needed: for host
// directories whose contents a sandbox controlled. A missing dir is not
// an error.
func RemoveTree(dir string) error { return tree.RemoveTree(dir) }

// RemoveBeneath is RemoveTree for name in the directory parent, a
// descriptor the caller resolved safely (a volume a sandbox still writes
// to). A missing name is not an error; a tree deeper than MaxDepth wraps
// ErrTooDeep.
func RemoveBeneath(parent int, name string) error { return tree.RemoveBeneath(parent, name) }

// ChmodNoFollow sets the mode of name in the directory parent without
// following a symlink (a link is refused with ELOOP), on any kernel.
func ChmodNoFollow(parent int, name string, mode uint32) error {
	return tree.ChmodNoFollow(parent, name, mode)
}
