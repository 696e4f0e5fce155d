package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

// Files of a sandbox, for an agent's read/write/edit tools. Each call runs
// tent's file helper inside the sandbox with the sandbox's own view and
// restrictions (mounts, Landlock, seccomp, identity): a path the sandbox
// cannot reach fails the same way for these calls, with an
// *os.PathError carrying the errno (errors.Is(err, fs.ErrNotExist) works).
// Contents stream; nothing is held in memory.

// ReadFile streams the file at path inside the sandbox to w.
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer) error {
	return s.File(ctx, FileRequest{Op: FileRead, Path: path, Out: w})
}

// WriteFile creates the file at path with perm, or replaces it as one
// step (see [FileWrite]), and streams r into it.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, perm os.FileMode) error {
	return s.File(ctx, FileRequest{Op: FileWrite, Path: path, Mode: perm, In: r})
}

// ListDir lists the directory at path.
func (s *Sandbox) ListDir(ctx context.Context, path string) ([]FileInfo, error) {
	var out bytes.Buffer
	if err := s.File(ctx, FileRequest{Op: FileList, Path: path, Out: &out}); err != nil {
		return nil, err
	}
	var infos []FileInfo
	return infos, json.Unmarshal(out.Bytes(), &infos)
}

// Stat describes the file at path (not following a final symlink).
func (s *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	var out bytes.Buffer
	var fi FileInfo
	if err := s.File(ctx, FileRequest{Op: FileStat, Path: path, Out: &out}); err != nil {
		return fi, err
	}
	return fi, json.Unmarshal(out.Bytes(), &fi)
}

// Remove deletes the file or empty directory at path; with all, a whole
// tree.
func (s *Sandbox) Remove(ctx context.Context, path string, all bool) error {
	op := FileRemove
	if all {
		op = FileRemoveAll
	}
	return s.File(ctx, FileRequest{Op: op, Path: path})
}

// File runs one operation of tent's file helper inside the sandbox. A
// failure the helper reports is an *os.PathError carrying the errno.
func (s *Sandbox) File(ctx context.Context, req FileRequest) error {
	op := req.Op // the caller's, for errors
	req, inputErr := req.Framed()
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
	if res.ExitCode == fs.HelperFailed {
		name, _, _ := strings.Cut(strings.TrimSpace(stderr), " ")
		for e := syscall.Errno(1); e < 256; e++ {
			if unix.ErrnoName(e) == name {
				return &os.PathError{Op: op, Path: path, Err: e}
			}
		}
	}
	return &os.PathError{Op: op, Path: path, Err: fmt.Errorf("file helper exited %d: %s", res.ExitCode, strings.TrimSpace(stderr))}
}
