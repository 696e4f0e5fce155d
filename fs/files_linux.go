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
// mode), list (JSON array of FileInfo), stat (JSON FileInfo), remove
// (file or empty directory), remove-all. It returns the exit code.
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
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return &os.PathError{Op: "read", Path: path, Err: unix.EISDIR}
		}
		_, err = io.Copy(stdout, f)
		return err
	case "write":
		mode := os.FileMode(0o644)
		if len(rest) > 0 {
			var m uint32
			if _, err := fmt.Sscanf(rest[0], "%o", &m); err != nil || m > 0o7777 {
				return &os.PathError{Op: "write", Path: path, Err: unix.EINVAL}
			}
			mode = os.FileMode(m)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, stdin); err != nil {
			f.Close()
			return err
		}
		return f.Close()
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
