package fs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FileHelperArg0 is the argv[0] of tent's file helper: the host binary
// run inside a sandbox, with the sandbox's every restriction (mounts,
// Landlock, seccomp, identity), to read, write, list, stat or remove one
// path for an agent's file tools. Whatever the sandbox could not do, the
// helper cannot either.
const FileHelperArg0 = "tent-fs"

// FileInfo describes one file as the helper reports it.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
	// Link is a symlink's target.
	Link string `json:"link,omitempty"`
}

// Exit codes of the helper: 0 success, helperErrno+errno-name on stderr
// for a failed system call, 2 for bad usage.
const (
	helperUsage = 2
	// HelperFailed is the helper's exit code when an operation failed; its
	// stderr then holds "ERRNO_NAME message".
	HelperFailed = 3
)

// RunFileHelper is the helper's main: args are [op, path, ...] with op
// one of read (file to stdout), write (stdin to file; optional octal
// mode), list (JSON array of FileInfo), stat (JSON FileInfo), untar
// (stdin, a WriteTar archive, into the directory), remove (file or empty
// directory), remove-all. It returns the exit code.
//
// read and write act on regular files only: the path (symlinks followed,
// as the sandbox would) is opened O_NONBLOCK and checked by fstat, and
// anything else — a device such as /dev/zero, a FIFO, a socket — fails
// with EINVAL without a byte read or written, so the host is never fed
// an endless stream nor left waiting on a pipe. read sends at most the
// size fstat gave (a file grown meanwhile is cut there); a file that
// reports size 0, as procfs and sysfs files do, is read up to
// MaxPseudoFileRead bytes, and fails with EFBIG beyond.
func RunFileHelper(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "EINVAL usage: tent-fs read|write|list|stat|remove|remove-all PATH [MODE]")
		return helperUsage
	}
	op, path := args[0], args[1]
	err := fileOp(op, path, args[2:], stdin, stdout)
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		errno = unix.EIO
	}
	fmt.Fprintf(stderr, "%s %v\n", unix.ErrnoName(errno), err)
	return HelperFailed
}

func fileOp(op, path string, rest []string, stdin io.Reader, stdout io.Writer) error {
	switch op {
	case "read":
		return readRegular(path, stdout)
	case "write":
		mode := os.FileMode(0o644)
		if len(rest) > 0 {
			var m uint32
			if _, err := fmt.Sscanf(rest[0], "%o", &m); err != nil || m > 0o7777 {
				return &os.PathError{Op: "write", Path: path, Err: unix.EINVAL}
			}
			mode = os.FileMode(m)
		}
		return writeRegular(path, mode, stdin)
	case "list":
		ents, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		out := make([]FileInfo, 0, len(ents))
		for _, e := range ents {
			if fi, err := lstatInfo(filepath.Join(path, e.Name())); err == nil {
				out = append(out, fi)
			}
		}
		return json.NewEncoder(stdout).Encode(out)
	case "stat":
		fi, err := lstatInfo(path)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(fi)
	case "tar":
		return TarDir(path, stdout)
	case "untar":
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return ExtractTar(stdin, path)
	case "remove":
		return os.Remove(path)
	case "remove-all":
		if _, err := os.Lstat(path); err != nil {
			return err
		}
		return os.RemoveAll(path)
	}
	return &os.PathError{Op: op, Path: path, Err: unix.EINVAL}
}

func lstatInfo(path string) (FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return FileInfo{}, err
	}
	info := FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC(), IsDir: fi.IsDir()}
	if fi.Mode()&os.ModeSymlink != 0 {
		info.Link, _ = os.Readlink(path)
	}
	return info, nil
}

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

func writeRegular(path string, mode os.FileMode, stdin io.Reader) error {
	f, _, err := openRegularPath(path, os.O_WRONLY|os.O_CREATE, mode)
	if err != nil {
		return err
	}
	// Truncate only once it is known to be a regular file.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	if _, err := io.Copy(f, stdin); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
