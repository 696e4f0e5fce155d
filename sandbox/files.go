package sandbox

import (
	"io"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
)

// FileInfo describes a file inside a sandbox.
type FileInfo = fs.FileInfo

// FileOp names one operation of tent's file helper, which runs inside the
// sandbox with the sandbox's own view and restrictions (see [Sandbox.File]).
type FileOp string

// The file operations. Path is the path inside the sandbox; In and Out are
// the operation's input and output streams.
const (
	// FileRead streams the regular file at Path to Out. With Args[0]
	// "sized", Out first receives the number of bytes that follow, in
	// decimal, and a newline; a file that shrinks while it is read then
	// fails with EAGAIN.
	FileRead FileOp = "read"
	// FileWrite creates or truncates the file at Path with the mode in
	// Args[0] (octal, e.g. "644") and streams In into it.
	FileWrite FileOp = "write"
	// FilePut creates the missing parent directories of Path (mode 0755),
	// then writes it as FileWrite does (Args[0], when given, is the mode)
	// and writes its [FileInfo] to Out, as JSON.
	FilePut FileOp = "put"
	// FileStat writes the [FileInfo] of Path (not following a final
	// symlink) to Out, as JSON.
	FileStat FileOp = "stat"
	// FileList writes the [FileInfo]s of the directory at Path to Out, as a
	// JSON array. Args[0], when given, is a depth (decimal, at least 1,
	// the default): at 2 and more the entries of its subdirectories
	// follow each subdirectory's own, down to that many levels (symlinks
	// are never followed below Path).
	FileList FileOp = "list"
	// FileMkdir creates the directory at Path and its missing parents
	// (mode 0755) and writes its [FileInfo] to Out, as JSON. A directory
	// already there fails with EEXIST, another file with ENOTDIR.
	FileMkdir FileOp = "mkdir"
	// FileRename renames Path to Args[0], creating the missing parents of
	// Args[0] (mode 0755), and writes the [FileInfo] of Args[0] to Out,
	// as JSON. A file at Args[0] is replaced, as rename(2) does.
	FileRename FileOp = "rename"
	// FileWatch watches the directory at Path with inotify and streams
	// its changes to Out as JSON lines (see fs.WatchEvent), the first
	// {"ready":true} once the watch is in place, until In reaches EOF
	// (nil In: at once) or ctx ends. Args are flags: "recursive" (the
	// subdirectories too), "entries" (each change's FileInfo).
	FileWatch FileOp = "watch"
	// FileTar streams the tree at Path to Out as a tar archive.
	FileTar FileOp = "tar"
	// FileUntar extracts the tar archive read from In beneath the
	// directory at Path.
	FileUntar FileOp = "untar"
	// FileRemove deletes the file or empty directory at Path.
	FileRemove FileOp = "remove"
	// FileRemoveAll deletes the tree at Path.
	FileRemoveAll FileOp = "remove-all"
)

// FileRequest is one file operation inside a sandbox.
type FileRequest struct {
	Op   FileOp
	Path string
	// Args are the operation's further arguments (see each [FileOp]).
	Args []string
	// In is read by operations that take input; nil reads nothing.
	In io.Reader
	// Out receives operations' output; nil discards it.
	Out io.Writer
}

// Usage is what a sandbox uses now, read from its cgroups.
type Usage = cgroups.Usage
