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
	// FileRead streams the regular file at Path to Out.
	FileRead FileOp = "read"
	// FileWrite creates or truncates the file at Path with the mode in
	// Args[0] (octal, e.g. "644") and streams In into it.
	FileWrite FileOp = "write"
	// FileStat writes the [FileInfo] of Path (not following a final
	// symlink) to Out, as JSON.
	FileStat FileOp = "stat"
	// FileList writes the [FileInfo]s of the directory at Path to Out, as a
	// JSON array.
	FileList FileOp = "list"
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
