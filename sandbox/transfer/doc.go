// Package transfer copies files and directories between the host and a
// sandbox of any [sandbox.Backend], with docker cp's semantics; it is the
// engine of `tent cp`.
//
// Inside the sandbox, every operation is one call of tent's file helper
// ([sandbox.Handle.File]): paths are resolved in the sandbox's own view,
// with its mounts and restrictions, so a path the sandbox cannot reach
// fails the same way here (an *os.PathError carrying the errno).
//
// # Semantics
//
//   - A file is copied to the destination, or into it (as DST/NAME) when
//     it is an existing directory; a destination ending in / must be an
//     existing directory.
//   - A directory is copied recursively to the destination when it does
//     not exist, or into it (as DST/NAME) when it is an existing
//     directory. Only directories, regular files and symlinks are copied
//     (anything else is a [*TypeError]); symlinks are copied as links,
//     never followed ([Options].FollowLink follows the source itself when
//     it is one); permission bits are kept, set-id bits, owners and
//     extended attributes never.
//   - Out of a sandbox, an existing directory is never merged into
//     ([*ExistsError]), and at most [Options].MaxSize bytes of file data
//     come out ([ErrTooLarge]).
//
// # The host side
//
// Everything a sandbox wrote is hostile input to the code that runs on
// the host for it (see docs/security.md): names, symlinks, FIFOs, devices,
// sizes, archive headers. A copy out of a sandbox therefore follows these
// rules:
//
//   - The destination is settled once: its directory is opened and held
//     as a descriptor, and everything is written beneath it with openat,
//     mkdirat, symlinkat and renameat; a symlink at the destination is
//     replaced, never followed.
//   - It is written first under a temporary name beside the destination
//     (files created O_EXCL|O_NOFOLLOW), synced, and renamed into place
//     only once the whole copy succeeded; a failed copy leaves the
//     destination exactly as it was, and no temporary file beside it.
//     The temporaries ([CopyTemps]) are locked while they are written:
//     each copy out removes those a killed copy left in its
//     destination's directory, never a live one.
//   - A directory comes out as the helper's tar stream, filtered (only
//     directories, regular files and symlinks, permission bits only, at
//     most [MaxEntries] entries and MaxSize bytes of data) and extracted
//     with layer.ExtractTar beneath the temporary directory: no entry leaves
//     it, none is written through a symlink, sparse files stay sparse.
//
// A copy into a sandbox reads the host source without following a
// symlink swapped in meanwhile and without blocking on a FIFO (regular
// files are opened O_NOFOLLOW|O_NONBLOCK and checked on the descriptor;
// directories are archived descriptor-relative by layer.WriteTar); what it
// writes inside is written with the sandbox's own rights.
//
// The same host-side rules serve the frontends that manage such trees
// themselves (E2B's volumes): [RemoveTree], [RemoveBeneath] and
// [ChmodNoFollow] follow no link and stop at [MaxDepth]; the bounds of a
// file's metadata are [MaxMetadataEntries], [MaxMetadataName] and
// [MaxMetadataValue].
package transfer
