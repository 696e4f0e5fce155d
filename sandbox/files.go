package sandbox

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
)

// FileInfo describes a file inside a sandbox.
type FileInfo = fs.FileInfo

// FileOp names one operation of tent's file helper, which runs inside the
// sandbox with the sandbox's own view and restrictions (see [Sandbox.File]).
type FileOp string

// The file operations. Path is the path inside the sandbox; In and Out are
// the operation's input and output streams; the request's other fields
// are the operations' options.
const (
	// FileRead streams the regular file at Path to Out. With Sized, Out
	// first receives the number of bytes that follow, in decimal, and a
	// newline; a file that shrinks while it is read then fails with
	// EAGAIN.
	FileRead FileOp = "read"
	// FileWrite creates the file at Path with Mode, or replaces it, and
	// streams In into it. An existing file is replaced as one step (a
	// temporary beside it, renamed over it once In is written and
	// synced), keeping its mode, owner and metadata: a full disk or a
	// killed helper leaves it as it was. Only content whose end the
	// helper was told of is committed (see [FileRequest.Framed]): an In
	// that fails, or a caller killed mid-write, leaves it as it was too,
	// and the request fails with In's error.
	FileWrite FileOp = "write"
	// FilePut creates the missing parent directories of Path (mode 0755),
	// then writes it as FileWrite does, sets its Metadata, and writes its
	// [FileInfo] to Out, as JSON.
	FilePut FileOp = "put"
	// FileStat writes the [FileInfo] of Path (not following a final
	// symlink) to Out, as JSON.
	FileStat FileOp = "stat"
	// FileList writes the [FileInfo]s of the directory at Path to Out, as a
	// JSON array. At a Depth of 2 and more the entries of its
	// subdirectories follow each subdirectory's own, down to that many
	// levels (symlinks are never followed below Path).
	FileList FileOp = "list"
	// FileMkdir creates the directory at Path and its missing parents
	// (mode 0755) and writes its [FileInfo] to Out, as JSON. A directory
	// already there fails with EEXIST, another file with ENOTDIR.
	FileMkdir FileOp = "mkdir"
	// FileRename renames Path to To, creating the missing parents of To
	// (mode 0755), and writes the [FileInfo] of To to Out, as JSON. A
	// file at To is replaced, as rename(2) does.
	FileRename FileOp = "rename"
	// FileWatch watches the directory at Path with inotify and streams
	// its changes to Out as JSON lines (see fs.WatchEvent), the first
	// {"ready":true} once the watch is in place, until In reaches EOF
	// (nil In: at once) or ctx ends; Recursive watches the
	// subdirectories too, Entries adds each change's FileInfo.
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

// FileRequest is one file operation inside a sandbox (see each [FileOp]
// for the fields it reads; the others are ignored).
type FileRequest struct {
	Op   FileOp `json:"op"`
	Path string `json:"path"`
	// Mode is the permission bits FileWrite and FilePut create a file
	// with; 0 means 0644.
	Mode os.FileMode `json:"mode,omitempty"`
	// Metadata is set on the file FilePut writes (extended attributes
	// of tent's, which E2B's files API serves).
	Metadata map[string]string `json:"metadata,omitempty"`
	// To is FileRename's destination.
	To string `json:"to,omitempty"`
	// Depth is FileList's depth; 0 means 1 (the directory's entries).
	Depth int `json:"depth,omitempty"`
	// Sized has FileRead write the size first.
	Sized bool `json:"sized,omitempty"`
	// Recursive and Entries are FileWatch's options.
	Recursive bool `json:"recursive,omitempty"`
	Entries   bool `json:"entries,omitempty"`
	// In is read by operations that take input; nil reads nothing.
	In io.Reader `json:"-"`
	// Out receives operations' output; nil discards it.
	Out io.Writer `json:"-"`
}

// The framed forms of FileWrite and FilePut, as the helper receives them
// (see [FileRequest.Framed]). They are file helper ops of their own, not
// an option of write and put, so that a helper that does not know them
// (one of an older tent: a supervisor runs its own binary as the helper,
// and a new client may talk to a supervisor an older tent started)
// refuses them, EINVAL, rather than writing the frames as content.
const (
	fileWriteFramed FileOp = fs.FileOpWriteFramed
	filePutFramed   FileOp = fs.FileOpPutFramed
)

// Framed returns r as it is to reach the file helper, and a function
// that tells, once the request is over, whether its input failed: an
// *os.PathError wrapping the input's error, for the backend to return
// rather than the helper's report of an input cut short (nil if the
// input did not fail). Every backend runs its FileWrite and FilePut
// requests through it, where the caller's reader is read (so, for a
// backend behind a socket, in the caller's process).
//
// A write commits only content whose end it was told of: with In a
// reader (not a regular file), the request becomes the op's framed form
// and its In frames r.In (see [fs.FrameEncoder]): length-prefixed chunks,
// then an end mark with the total count once r.In returned io.EOF. A
// reader that fails, or a caller killed mid-write, ends the helper's
// input without the end mark, and the helper fails (EPIPE), leaving the
// file as it was. A regular file is handed to the helper as it is: the
// helper reads it itself, and its end is the file's; a nil In is empty
// content. A request already framed, or of another op, is returned as it
// is (inputErr then reports nil).
func (r FileRequest) Framed() (req FileRequest, inputErr func() error) {
	none := func() error { return nil }
	if (r.Op != FileWrite && r.Op != FilePut) || r.In == nil {
		return r, none
	}
	if f, ok := r.In.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			return r, none
		}
	}
	enc := fs.NewFrameEncoder(r.In)
	op := r.Op
	r.In = enc
	if r.Op == FileWrite {
		r.Op = fileWriteFramed
	} else {
		r.Op = filePutFramed
	}
	return r, func() error {
		if err := enc.SourceErr(); err != nil {
			return &os.PathError{Op: string(op), Path: r.Path, Err: fmt.Errorf("reading the content: %w", err)}
		}
		return nil
	}
}

// helperArgs are the file helper's arguments for r: op, path, options.
func (r FileRequest) helperArgs() []string {
	args := []string{string(r.Op), r.Path}
	switch r.Op {
	case FileRead:
		if r.Sized {
			args = append(args, "sized")
		}
	case FileWrite, FilePut, fileWriteFramed, filePutFramed:
		mode := r.Mode.Perm() | r.Mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
		if mode == 0 {
			mode = 0o644
		}
		args = append(args, fmt.Sprintf("%o", unixMode(mode)))
		if r.Op == FilePut || r.Op == filePutFramed {
			names := make([]string, 0, len(r.Metadata))
			for k := range r.Metadata {
				names = append(names, k)
			}
			slices.Sort(names)
			for _, k := range names {
				args = append(args, "meta", k, r.Metadata[k])
			}
		}
	case FileRename:
		args = append(args, r.To)
	case FileList:
		if r.Depth > 1 {
			args = append(args, strconv.Itoa(r.Depth))
		}
	case FileWatch:
		if r.Recursive {
			args = append(args, "recursive")
		}
		if r.Entries {
			args = append(args, "entries")
		}
	}
	return args
}

// unixMode is m's permission and set-id bits as chmod(2) numbers them.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// Usage is what a sandbox uses now, read from its cgroups.
type Usage = cgroups.Usage
