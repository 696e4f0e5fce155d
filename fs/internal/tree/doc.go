// Package tree walks, copies, removes and archives directory trees a
// sandbox controls, descriptor-relative and without following symlinks:
// the low-level pieces that fs/layer (diffs, exports, archives) and fs's
// in-sandbox file helper (its tar and untar ops) share.
//
// walk_linux.go holds the openat2 helpers ([OpenBeneath], [DirCursor])
// and the removals; overlay_linux.go the overlay markers (whiteouts,
// opaque directories) and regular-file opening; copy_linux.go the sparse
// copy; tar.go the archive ([WriteTar], [ExtractTar]). fs/layer gives the
// public names.
package tree
