package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxPseudoFileRead bounds what the file helper's read sends of a
// regular file whose size reads as 0 (procfs, sysfs).
const MaxPseudoFileRead = 4 << 20

// openRegularPath opens path with flags|O_NONBLOCK (a FIFO neither
// blocks nor waits for a peer) and returns it only if fstat of the
// descriptor says it is a regular file.
func openRegularPath(path string, flags int, perm os.FileMode) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, flags|unix.O_NONBLOCK|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%v is not a regular file: %w", fi.Mode().Type(), unix.EINVAL)}
	}
	return f, fi, nil
}

func readRegular(path string, stdout io.Writer) error {
	f, fi, err := openRegularPath(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if size := fi.Size(); size > 0 {
		_, err = io.CopyN(stdout, f, size)
		if errors.Is(err, io.EOF) { // shrank meanwhile: what there was
			err = nil
		}
		return err
	}
	n, err := io.Copy(stdout, io.LimitReader(f, MaxPseudoFileRead+1))
	if err == nil && n > MaxPseudoFileRead {
		err = &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("a size-0 file longer than %d bytes: %w", MaxPseudoFileRead, unix.EFBIG)}
	}
	return err
}

// readSized is read with the length first: a decimal byte count and a
// newline, then exactly that many bytes. A file that shrinks while it
// is read fails with EAGAIN (its length was sent already); a size-0
// file is read into memory first (at most MaxPseudoFileRead bytes).
func readSized(path string, stdout io.Writer) error {
	f, fi, err := openRegularPath(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size := fi.Size()
	if size == 0 {
		var buf bytes.Buffer
		if n, err := io.Copy(&buf, io.LimitReader(f, MaxPseudoFileRead+1)); err != nil {
			return err
		} else if n > MaxPseudoFileRead {
			return &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("a size-0 file longer than %d bytes: %w", MaxPseudoFileRead, unix.EFBIG)}
		}
		if _, err := fmt.Fprintf(stdout, "%d\n", buf.Len()); err != nil {
			return err
		}
		_, err := buf.WriteTo(stdout)
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%d\n", size); err != nil {
		return err
	}
	if _, err := io.CopyN(stdout, f, size); errors.Is(err, io.EOF) {
		return &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("the file shrank while it was read: %w", unix.EAGAIN)}
	} else if err != nil {
		return err
	}
	return nil
}
