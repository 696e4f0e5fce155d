package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
)

// FileHelperArg0 is the argv[0] of tent's file helper: the host binary
// run inside a sandbox, with the sandbox's every restriction (mounts,
// Landlock, seccomp, identity), to read, write, list, stat or remove one
// path for an agent's file tools. Whatever the sandbox could not do, the
// helper cannot either.
const FileHelperArg0 = "tent-fs"

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
// mode; then the file's FileInfo as JSON), put (write, creating the parents, then replace the file's
// metadata with the "meta NAME VALUE" triples that follow the optional
// mode, then the file's FileInfo as JSON), list (JSON array of FileInfo; an optional depth, default 1,
// lists subdirectories to that depth), stat (JSON FileInfo), mkdir (a
// directory and its parents; EEXIST when it is there already, ENOTDIR
// when a non-directory is; its FileInfo as JSON), rename (to the path in
// the next argument, creating its parents; the FileInfo of the
// destination as JSON), watch (see [WatchEvent]), untar (stdin, a
// WriteTar archive, into the directory), remove (file or empty
// directory), remove-all. It returns the exit code.
//
// read and write act on regular files only: the path (symlinks followed,
// as the sandbox would) is opened O_NONBLOCK and checked by fstat, and
// anything else — a device such as /dev/zero, a FIFO, a socket — fails
// with EINVAL without a byte read or written, so the host is never fed
// an endless stream nor left waiting on a pipe. read sends at most the
// size fstat gave (a file grown meanwhile is cut there); a file that
// reports size 0, as procfs and sysfs files do, is read up to
// MaxPseudoFileRead bytes, and fails with EFBIG beyond. write and put
// replace an existing file as one step (see writeRegular): a full disk
// or a killed helper leaves it as it was. write-framed and put-framed are
// write and put whose stdin is framed (see [FrameEncoder]): an input that
// ends before its end mark fails them with EPIPE (a bad frame, or an end
// mark counting other than what came, with EPROTO), and the file is left
// as it was (but where it must be written in place: see writeInPlace).
func RunFileHelper(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "EINVAL usage: tent-fs read|write|put|list|stat|mkdir|rename|watch|tar|untar|remove|remove-all PATH [ARG...]")
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
		if len(rest) > 0 && rest[0] == "sized" {
			return readSized(path, stdout)
		}
		return readRegular(path, stdout)
	case "write", FileOpWriteFramed:
		mode, err := modeArg("write", path, rest)
		if err != nil {
			return err
		}
		if op == FileOpWriteFramed {
			stdin = newFrameDecoder(stdin)
		}
		if err := writeRegular(path, mode, stdin, true); err != nil {
			return err
		}
		return encodeInfo(path, stdout)
	case "list":
		depth := 1
		if len(rest) > 0 {
			d, err := strconv.Atoi(rest[0])
			if err != nil || d < 1 {
				return &os.PathError{Op: "list", Path: path, Err: fmt.Errorf("depth %q: want a positive number: %w", rest[0], unix.EINVAL)}
			}
			depth = d
		}
		return listTree(path, depth, stdout)
	case "put", FileOpPutFramed:
		rest, meta, err := metadataArgs(path, rest)
		if err != nil {
			return err
		}
		mode, err := modeArg("put", path, rest)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if op == FileOpPutFramed {
			stdin = newFrameDecoder(stdin)
		}
		if err := writeRegular(path, mode, stdin, false); err != nil {
			return err
		}
		if err := setMetadata(path, meta); err != nil {
			return err
		}
		return encodeInfo(path, stdout)
	case "mkdir":
		switch fi, err := os.Stat(path); {
		case err == nil && fi.IsDir():
			return &os.PathError{Op: "mkdir", Path: path, Err: unix.EEXIST}
		case err == nil:
			return &os.PathError{Op: "mkdir", Path: path, Err: fmt.Errorf("exists and is not a directory: %w", unix.ENOTDIR)}
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return encodeInfo(path, stdout)
	case "rename":
		if len(rest) < 1 || rest[0] == "" {
			return &os.PathError{Op: "rename", Path: path, Err: fmt.Errorf("no destination: %w", unix.EINVAL)}
		}
		if _, err := os.Lstat(path); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(rest[0]), 0o755); err != nil {
			return err
		}
		if err := os.Rename(path, rest[0]); err != nil {
			return err
		}
		return encodeInfo(rest[0], stdout)
	case "watch":
		return watchDir(path, rest, stdin, stdout)
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
		return layer.ExtractTar(stdin, path)
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

// modeArg parses the optional octal mode in rest[0] (default 0644).
func modeArg(op, path string, rest []string) (os.FileMode, error) {
	if len(rest) == 0 {
		return 0o644, nil
	}
	var m uint32
	if _, err := fmt.Sscanf(rest[0], "%o", &m); err != nil || m > 0o7777 {
		return 0, &os.PathError{Op: op, Path: path, Err: unix.EINVAL}
	}
	return os.FileMode(m), nil
}
