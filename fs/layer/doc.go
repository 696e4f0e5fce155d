// Package layer reads and exports the writable layers of a sandbox's
// copy-on-write mounts from the host side, where everything in them is
// the sandbox's and hostile.
//
// [CowLayer] names a cow mount's lower directory, target and upper layer.
// [Diff] lists what the sandbox changed (added, modified, deleted; git
// control files marked), [ApplyChanges] exports the changes onto a
// directory (regular files copied with their holes, atomically; a
// deletion never reaches through a symlink), and [WritePatch] writes them
// as a unified diff that `patch -p1` or `git apply` applies. [WriteTar]
// and [ExtractTar] archive and restore a tree (whiteouts and opaque
// directories included), [RemoveTree] and [RemoveBeneath] remove one.
//
// Every walk is descriptor-relative, opens each component with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS),
// reads only regular files (O_NOFOLLOW|O_NONBLOCK, checked by fstat, up to
// the size fstat gave) and stops at [MaxDepth] levels with [ErrTooDeep].
//
// # Files by job
//
//   - layer*.go: CowLayer's methods.
//   - change.go, diff.go: a cow layer's changes; diff_apply_linux.go:
//     exporting them.
//   - patch*.go: the unified diff (Myers, binary literals, git quoting).
//   - walk_linux.go: the openat2 helpers (openBeneath, dirCursor) and
//     the removals; overlay_linux.go: the overlay markers (whiteouts,
//     opaque directories) and regular-file opening; copy_linux.go: the
//     sparse copy; tar.go: the archive (WriteTar, ExtractTar), which
//     fs/files' in-sandbox file helper uses too for its tar and untar ops.
package layer
