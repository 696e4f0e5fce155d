package sandbox

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs/files"
)

// FileInfo describes a file inside a sandbox: its name and absolute
// path, type and mode (a symlink's Link is its target), size,
// modification time, owner and metadata.
type FileInfo = files.FileInfo

// ReadOptions are [Handle.ReadFile]'s options.
type ReadOptions struct {
	// Limit, when above 0, fails the read of a file larger than Limit
	// bytes with EFBIG before a byte of it is written (a huge sparse
	// file costs nothing).
	Limit int64 `json:"limit,omitempty"`
	// Size, when not nil, is called with the file's size before its
	// first byte is written; an error it returns ends the read, and is
	// the read's.
	Size func(int64) error `json:"-"`
}

// WriteOptions are [Handle.WriteFile]'s options.
type WriteOptions struct {
	// Mode is the permission bits (and set-id, sticky) a new file is made
	// with; 0 means 0644. An existing file keeps its own.
	Mode os.FileMode `json:"mode,omitempty"`
	// Parents makes the missing parent directories (mode 0755) and
	// replaces the file's metadata with Metadata (none when nil);
	// without it a missing parent fails with ENOENT, the file's
	// metadata is kept, and Metadata must be nil (EINVAL).
	Parents bool `json:"parents,omitempty"`
	// Metadata are the file's metadata with Parents (extended
	// attributes of tent's, which E2B's files API serves; see
	// files.MaxMetadataEntries for their bounds).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Framed says the content is framed already, as files.FrameEncoder
	// frames it: a backend that frames its caller's input in the
	// caller's process (package supervised) passes it on so. The
	// content's end is then its end mark, not its reader's EOF.
	Framed bool `json:"framed,omitempty"`
}

// WatchOptions are [Handle.Watch]'s options.
type WatchOptions struct {
	// Recursive watches the subdirectories too, those there at the start
	// and those made later (at most files.MaxWatchDirs; ENOSPC beyond).
	Recursive bool `json:"recursive,omitempty"`
	// Entries adds each change's FileInfo, where the file still exists.
	Entries bool `json:"entries,omitempty"`
}

// WatchEvent is one change of a directory [Handle.Watch] watches: Op is
// create (also a file moved in), write, remove, rename (also a file
// moved out) or chmod, and Name the changed path relative to the
// watched directory. The last event of a watch that failed has Err set,
// and nothing else.
type WatchEvent struct {
	Op   string    `json:"op,omitempty"`
	Name string    `json:"name,omitempty"`
	Info *FileInfo `json:"info,omitempty"`
	Err  error     `json:"-"`
}

// FileOp names a raw operation of tent's file helper, which runs inside
// the sandbox with the sandbox's own view and restrictions (see
// [Handle.File]). The typed verbs ([Handle.ReadFile], [Handle.Stat], ...)
// run the others.
type FileOp string

// The raw file operations: archive streams.
const (
	// FileTar streams the tree at Path to Out as a tar archive.
	FileTar FileOp = "tar"
	// FileUntar extracts the tar archive read from In beneath the
	// directory at Path, which it makes if needed.
	FileUntar FileOp = "untar"
)

// The typed verbs' operations (see files.RunFileHelper for each).
const (
	fileRead      FileOp = "read"
	fileWrite     FileOp = "write"
	filePut       FileOp = "put"
	fileStat      FileOp = "stat"
	fileList      FileOp = "list"
	fileMkdir     FileOp = "mkdir"
	fileRename    FileOp = "rename"
	fileWatch     FileOp = "watch"
	fileRemove    FileOp = "remove"
	fileRemoveAll FileOp = "remove-all"
)

// FileRequest is one raw file operation inside a sandbox: an archive
// streamed out of it (FileTar, to Out) or into it (FileUntar, from In).
type FileRequest struct {
	Op   FileOp `json:"op"`
	Path string `json:"path"`
	// In is read by operations that take input; nil reads nothing.
	In io.Reader `json:"-"`
	// Out receives operations' output; nil discards it.
	Out io.Writer `json:"-"`

	// The typed verbs' options, as the helper takes them.
	mode      os.FileMode
	metadata  map[string]string
	to        string
	depth     int
	sized     bool
	recursive bool
	entries   bool
}

// The framed forms of write and put, as the helper receives them (see
// [FileRequest.framed]). They are file helper ops of their own, not an
// option of write and put, so that a helper that does not know them
// refuses them, EINVAL, rather than writing the frames as content.
const (
	fileWriteFramed FileOp = files.FileOpWriteFramed
	filePutFramed   FileOp = files.FileOpPutFramed
)

// framed returns r as it is to reach the file helper, and a function
// that tells, once the request is over, whether its input failed: an
// *os.PathError wrapping the input's error, for the backend to return
// rather than the helper's report of an input cut short (nil if the
// input did not fail).
//
// A write commits only content whose end it was told of: with In a
// reader (not a regular file), the request becomes the op's framed form
// and its In frames r.In (see [files.FrameEncoder]): length-prefixed chunks,
// then an end mark with the total count once r.In returned io.EOF. A
// reader that fails, or a caller killed mid-write, ends the helper's
// input without the end mark, and the helper fails (EPIPE), leaving the
// file as it was. A regular file is handed to the helper as it is: the
// helper reads it itself, and its end is the file's; a nil In is empty
// content. With already, In is framed already (WriteOptions.Framed):
// only the op changes.
func (r FileRequest) framed(already bool) (req FileRequest, inputErr func() error) {
	none := func() error { return nil }
	if (r.Op != fileWrite && r.Op != filePut) || r.In == nil {
		return r, none
	}
	op := r.Op
	if r.Op == fileWrite {
		r.Op = fileWriteFramed
	} else {
		r.Op = filePutFramed
	}
	if already {
		return r, none
	}
	if f, ok := r.In.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			r.Op = op
			return r, none
		}
	}
	enc := files.NewFrameEncoder(r.In)
	r.In = enc
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
	case fileRead:
		if r.sized {
			args = append(args, "sized")
		}
	case fileWrite, filePut, fileWriteFramed, filePutFramed:
		mode := r.mode.Perm() | r.mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
		if mode == 0 {
			mode = 0o644
		}
		args = append(args, fmt.Sprintf("%o", unixMode(mode)))
		if r.Op == filePut || r.Op == filePutFramed {
			for _, k := range slices.Sorted(maps.Keys(r.metadata)) {
				args = append(args, "meta", k, r.metadata[k])
			}
		}
	case fileRename:
		args = append(args, r.to)
	case fileList:
		if r.depth > 1 {
			args = append(args, strconv.Itoa(r.depth))
		}
	case fileWatch:
		if r.recursive {
			args = append(args, "recursive")
		}
		if r.entries {
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
