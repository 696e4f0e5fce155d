//go:build linux

package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// The sandbox's side: one call of the file helper each.

// remoteOut runs the file helper's raw op on p and copies its stdout to
// w; an error of w (a limit reached) ends the helper (its pipe is
// closed). The helper writes to a pipe of ours, not to one a backend
// would copy, so that error is ours to see.
func remoteOut(ctx context.Context, h sandbox.Handle, op sandbox.FileOp, p string, w io.Writer) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, pr)
		pr.Close() // on an error, the helper meets EPIPE
		copied <- err
	}()
	err = h.File(ctx, sandbox.FileRequest{Op: op, Path: p, Out: pw})
	pw.Close()
	if cerr := <-copied; cerr != nil {
		return cerr
	}
	return err
}

// stat stats p inside the sandbox (not following a final symlink).
func stat(ctx context.Context, h sandbox.Handle, p string) (sandbox.FileInfo, error) {
	return h.Stat(ctx, p)
}

// readFile streams the file p to w, failing with ErrTooLarge past limit
// bytes (before a byte is written when the file is larger already).
func readFile(ctx context.Context, h sandbox.Handle, p string, w io.Writer, limit int64) error {
	tooLarge := func() error { return &tooLargeError{fmt.Sprintf("%s is larger than %d bytes", p, limit)} }
	lw := &limitWriter{w: w, max: limit, over: tooLarge}
	return h.ReadFile(ctx, p, lw, sandbox.ReadOptions{Size: func(n int64) error {
		if n > limit {
			return tooLarge()
		}
		return nil
	}})
}

// limitWriter fails with over() once more than max bytes were written.
type limitWriter struct {
	w    io.Writer
	n    int64 // written so far
	max  int64
	over func() error
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.max {
		return 0, l.over()
	}
	l.n += int64(len(p))
	return l.w.Write(p)
}

// tarOut streams the directory src out of the sandbox (the file helper's
// tar op) and writes the entries that are copied to w as a tar archive
// (see sanitizeTar).
func tarOut(ctx context.Context, h sandbox.Handle, src string, w io.Writer, limit int64) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sanitizeTar(pr, w, src, limit)
		pr.CloseWithError(err) // on an error, stop the helper
		done <- err
	}()
	err := remoteOut(ctx, h, sandbox.FileTar, src, pw)
	pw.CloseWithError(err)
	if serr := <-done; serr != nil && (err == nil || errors.Is(err, io.ErrClosedPipe)) {
		return serr
	}
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w (this tent's file helper cannot archive directories)", err)
	}
	return err
}

// writeFile creates or truncates the file p inside with mode and streams
// in into it.
func writeFile(ctx context.Context, h sandbox.Handle, p string, in io.Reader, mode iofs.FileMode) error {
	_, err := h.WriteFile(ctx, p, in, sandbox.WriteOptions{Mode: mode})
	return err
}

// untar creates the directory p inside (if needed) and extracts into it
// the archive that fill writes. fill writes to a pipe of ours, so that
// its error is seen.
func untar(ctx context.Context, h sandbox.Handle, p string, fill func(io.Writer) error) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	filled := make(chan error, 1)
	go func() {
		err := fill(pw)
		pw.Close()
		filled <- err
	}()
	err = h.File(ctx, sandbox.FileRequest{Op: sandbox.FileUntar, Path: p, In: pr})
	pr.Close()
	if ferr := <-filled; ferr != nil && err == nil {
		err = ferr
	}
	return err
}
