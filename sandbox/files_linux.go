package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/files"
)

// Files of a sandbox, for an agent's read/write/edit tools and for
// frontends' file APIs. Each call runs tent's file helper inside the
// sandbox with the sandbox's own view and restrictions (mounts,
// Landlock, seccomp, identity): a path the sandbox cannot reach fails
// the same way for these calls, with an *os.PathError carrying the errno
// (errors.Is(err, fs.ErrNotExist) works). Contents stream; what the
// helper answers besides (descriptions, listings, events) is bounded and
// decoded here, the one place that reads the helper's JSON: whatever
// runs inside the sandbox could forge it.

// Bounds of what the helper may answer: one FileInfo, a listing, one
// watch event.
const (
	maxInfoBytes    = 1 << 20
	maxListingBytes = 64 << 20
	maxEventBytes   = 256 << 10
	// watchBuffer is how many events a watch holds for a slow reader;
	// beyond, the helper waits (and the kernel's inotify queue bounds
	// what it keeps meanwhile).
	watchBuffer = 64
)

// ReadFile streams the regular file at path inside the sandbox (symlinks
// followed, as the sandbox would) to w; anything else — a directory, a
// FIFO, a device — fails with EISDIR or EINVAL before a byte is read.
// It writes at most the size the file had when it was opened: a file
// that shrinks meanwhile fails with EAGAIN. An error of w ends the read
// and is returned.
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer, opts ReadOptions) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		err := copySized(pr, w, path, opts)
		pr.Close() // on an error, the helper's writes fail
		copied <- err
	}()
	err = s.file(ctx, FileRequest{Op: fileRead, Path: path, sized: true, Out: pw}, false)
	pw.Close()
	cerr := <-copied
	var ours *readError
	switch {
	case errors.As(cerr, &ours):
		return ours.err
	case err != nil:
		return err
	}
	return cerr
}

// readError is an error of ReadFile's writer or options, which is the
// read's whatever the helper then reports.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// sinkWriter records its writer's error.
type sinkWriter struct {
	w   io.Writer
	err error
}

func (s *sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
	}
	return n, err
}

// copySized reads the helper's sized read from r: a decimal length and
// a newline, then that many bytes, which go to w.
func copySized(r io.Reader, w io.Writer, path string, opts ReadOptions) error {
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) > 21 {
		return fmt.Errorf("read %s: the file helper sent no length (%q): %w", path, line, unix.EPROTO)
	}
	size, err := strconv.ParseInt(string(line[:len(line)-1]), 10, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("read %s: the file helper's length %q: %w", path, line, unix.EPROTO)
	}
	if opts.Limit > 0 && size > opts.Limit {
		return &readError{&os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%d bytes, more than the limit of %d: %w", size, opts.Limit, unix.EFBIG)}}
	}
	if opts.Size != nil {
		if err := opts.Size(size); err != nil {
			return &readError{err}
		}
	}
	sw := &sinkWriter{w: w}
	if _, err := io.CopyN(sw, br, size); sw.err != nil {
		return &readError{sw.err}
	} else if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// WriteFile creates the file at path (symlinks followed, as the sandbox
// would) or replaces it as one step, and streams r into it: the content
// goes to a temporary beside the file, renamed over it once r returned
// io.EOF and it was synced, so a full disk, a reader that fails or a
// caller killed mid-write leaves the file as it was (and the request
// fails with r's error). An existing file keeps its mode, owner and,
// without opts.Parents, metadata. It returns the FileInfo of path.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteOptions) (FileInfo, error) {
	var fi FileInfo
	req := FileRequest{Op: fileWrite, Path: path, In: r, mode: opts.Mode}
	switch {
	case opts.Parents:
		req.Op, req.metadata = filePut, opts.Metadata
	case opts.Metadata != nil:
		return fi, &os.PathError{Op: "write", Path: path, Err: fmt.Errorf("metadata is set with Parents only: %w", unix.EINVAL)}
	}
	return fi, s.fileJSON(ctx, req, opts.Framed, maxInfoBytes, &fi)
}

// Stat describes the file at path (not following a final symlink: a
// symlink's FileInfo has its Link).
func (s *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, s.fileJSON(ctx, FileRequest{Op: fileStat, Path: path}, false, maxInfoBytes, &fi)
}

// ReadDir lists the directory at path: its entries in name order, and
// at a depth of 2 and more the entries of each subdirectory after the
// subdirectory's own, down to that many levels (symlinks are never
// followed below path); 0 means 1.
func (s *Sandbox) ReadDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	var infos []FileInfo
	err := s.fileJSON(ctx, FileRequest{Op: fileList, Path: path, depth: depth}, false, maxListingBytes, &infos)
	return infos, err
}

// Mkdir makes the directory at path and its missing parents (mode
// 0755) and returns its FileInfo; a directory already there fails with
// EEXIST, another file with ENOTDIR.
func (s *Sandbox) Mkdir(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, s.fileJSON(ctx, FileRequest{Op: fileMkdir, Path: path}, false, maxInfoBytes, &fi)
}

// Rename renames from to to (a symlink is renamed, not its target),
// making the missing parents of to (mode 0755), and returns the
// FileInfo of to. A file at to is replaced, as rename(2) does.
func (s *Sandbox) Rename(ctx context.Context, from, to string) (FileInfo, error) {
	var fi FileInfo
	return fi, s.fileJSON(ctx, FileRequest{Op: fileRename, Path: from, to: to}, false, maxInfoBytes, &fi)
}

// Remove deletes the file or empty directory at path (a symlink, not
// its target); with all, the whole tree.
func (s *Sandbox) Remove(ctx context.Context, path string, all bool) error {
	op := fileRemove
	if all {
		op = fileRemoveAll
	}
	return s.file(ctx, FileRequest{Op: op, Path: path}, false)
}

// File runs a raw operation of tent's file helper inside the sandbox:
// FileTar or FileUntar (another op fails with EINVAL). A failure the
// helper reports is an *os.PathError carrying the errno.
func (s *Sandbox) File(ctx context.Context, req FileRequest) error {
	if req.Op != FileTar && req.Op != FileUntar {
		return &os.PathError{Op: string(req.Op), Path: req.Path, Err: fmt.Errorf("not a raw file operation: %w", unix.EINVAL)}
	}
	return s.file(ctx, FileRequest{Op: req.Op, Path: req.Path, In: req.In, Out: req.Out}, false)
}

// fileJSON runs req and decodes what it answers, at most max bytes,
// into v.
func (s *Sandbox) fileJSON(ctx context.Context, req FileRequest, framed bool, max int, v any) error {
	out := &boundedBuffer{max: max}
	req.Out = out
	if err := s.file(ctx, req, framed); err != nil {
		return err
	}
	if out.over {
		return &os.PathError{Op: string(req.Op), Path: req.Path, Err: fmt.Errorf("the file helper's answer is larger than %d bytes: %w", max, unix.EFBIG)}
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		return &os.PathError{Op: string(req.Op), Path: req.Path, Err: fmt.Errorf("the file helper's answer: %v: %w", err, unix.EPROTO)}
	}
	return nil
}

// boundedBuffer keeps the first max bytes written to it and discards
// the rest (a failing writer would be dropped without a word).
type boundedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.over || b.Len()+len(p) > b.max {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// file runs one operation of the file helper; with framed, a write's
// input is framed already (WriteOptions.Framed).
func (s *Sandbox) file(ctx context.Context, req FileRequest, framed bool) error {
	op := req.Op // the caller's, for errors
	req, inputErr := req.framed(framed)
	out := req.Out
	if out == nil {
		out = io.Discard
	}
	// Stderr is captured: the helper's one-line errno report.
	args := req.helperArgs()
	res, err := s.exec(ctx, ExecRequest{Args: args, Stdin: req.In, Stdout: out}, true)
	if err != nil {
		return err
	}
	ferr := fileResult(string(op), req.Path, res, string(res.Stderr))
	if ierr := inputErr(); ierr != nil && ferr != nil {
		return ierr
	}
	return ferr
}

// fileResult turns the helper's exit into nil or an *os.PathError.
func fileResult(op, path string, res *ExecResult, stderr string) error {
	if res.ExitCode == 0 {
		return nil
	}
	if res.ExitCode == files.HelperFailed {
		name, _, _ := strings.Cut(strings.TrimSpace(stderr), " ")
		for e := syscall.Errno(1); e < 256; e++ {
			if unix.ErrnoName(e) == name {
				return &os.PathError{Op: op, Path: path, Err: e}
			}
		}
	}
	return &os.PathError{Op: op, Path: path, Err: fmt.Errorf("file helper exited %d: %s", res.ExitCode, strings.TrimSpace(stderr))}
}

// Watch watches the directory at path (symlinks followed) and returns
// once the watch is in place: the changes made from then on come on the
// channel, in order, until ctx ends or the directory itself is removed
// or moved away; then the channel is closed (a watch that failed sends
// an event with Err first). The reader must read until the channel is
// closed, or end ctx.
func (s *Sandbox) Watch(ctx context.Context, path string, opts WatchOptions) (<-chan WatchEvent, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	closeIn := sync.OnceFunc(func() { inW.Close() })
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.file(ctx, FileRequest{Op: fileWatch, Path: path, recursive: opts.Recursive, entries: opts.Entries, In: inR, Out: outW}, false)
		inR.Close()
		outW.Close()
		done <- err
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 0, 4096), maxEventBytes)
	var first files.WatchEvent
	if !lines.Scan() || json.Unmarshal(lines.Bytes(), &first) != nil || !first.Ready {
		closeIn()
		outR.CloseWithError(io.EOF)
		if err := <-done; err != nil {
			return nil, err
		}
		return nil, &os.PathError{Op: "watch", Path: path, Err: fmt.Errorf("the watch ended before it started: %w", unix.EPROTO)}
	}
	ch := make(chan WatchEvent, watchBuffer)
	go func() {
		defer close(ch)
		stop := context.AfterFunc(ctx, closeIn) // the helper reads EOF and ends
		defer stop()
		for lines.Scan() {
			var ev files.WatchEvent
			if json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Op == "" {
				continue
			}
			select {
			case ch <- WatchEvent{Op: ev.Op, Name: ev.Name, Info: ev.Info}:
			case <-ctx.Done():
			}
		}
		outR.CloseWithError(io.EOF) // a line too long stopped the scan: the helper's writes fail
		closeIn()
		err := <-done
		if err == nil {
			err = lines.Err()
		}
		if err != nil && ctx.Err() == nil {
			select {
			case ch <- WatchEvent{Err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return ch, nil
}
