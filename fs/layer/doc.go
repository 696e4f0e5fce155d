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
//   - tree_linux.go: the archives and removals, whose implementation is
//     fs/internal/tree (shared with fs's in-sandbox file helper).
package layer
