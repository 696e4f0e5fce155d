// Package files is tent's in-sandbox file helper: the host binary,
// re-executed inside a sandbox as argv[0] [FileHelperArg0] ("tent-fs"),
// that reads, writes, lists, stats, renames, removes, watches and
// archives one path for the sandbox's file verbs, with the sandbox's
// every restriction (mounts, Landlock, seccomp, identity). Whatever the
// sandbox could not do, the helper cannot either.
//
// [RunFileHelper] is its main (namespaces' init dispatches to it); each
// op's arguments, output and exit codes are described there. The host
// side (sandbox's typed file verbs) decodes its answers: [FileInfo] and
// [WatchEvent] as JSON, failures as [HelperFailed] with "ERRNO message"
// on stderr.
//
// Reads and writes act on regular files only, and never block on a FIFO
// or stream a device. A write replaces its file as one step (a
// temporary named by [WriteTemps], renamed over it), and its framed
// form ([FrameEncoder], ops [FileOpWriteFramed] and [FileOpPutFramed])
// commits only content whose end it was told of, so an upload cut
// mid-way leaves the file as it was. File metadata is kept in extended
// attributes under [MetadataXattrPrefix], bounded by [MaxMetadataEntries],
// [MaxMetadataName] and [MaxMetadataValue].
//
// The helper imports fs/layer for its tar and untar ops (the same
// descriptor-relative archive the host side reads as hostile input);
// package fs does not import it.
//
// # Files by job
//
//   - files.go: FileInfo, WatchEvent and the metadata bounds;
//     helper_linux.go: RunFileHelper and the op dispatch.
//   - read_linux.go, write_linux.go: regular files in and out (the
//     atomic replace, the in-place fallback); info_linux.go: stat, list
//     and metadata; watch_linux.go: the inotify watch; tar_linux.go: the
//     archive of a directory.
//   - frame*.go: the framed input (encoder on the host, decoder in the
//     helper).
package files
