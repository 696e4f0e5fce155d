package transfer

import (
	"errors"
	"fmt"
	iofs "io/fs"
)

// ErrTooLarge is matched (errors.Is) by the error of a copy out that
// stopped at [Options].MaxSize bytes of file data; its message names the
// file and the limit.
var ErrTooLarge = errors.New("larger than the copy's limit")

// tooLargeError is an ErrTooLarge with its own message.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string        { return e.msg }
func (e *tooLargeError) Is(target error) bool { return target == ErrTooLarge }

// TypeError reports a file that is not copied: a special file (named
// pipe, socket, device) on either side, or, for [CopyOutTo] without
// [Options].FollowLink, a symlink, which has no contents to write.
type TypeError struct {
	// Path is the file, as the caller named it (inside the sandbox or on
	// the host).
	Path string
	// Mode is its type.
	Mode iofs.FileMode
	// Link is a symlink's target.
	Link string
}

// Error says what the file is and what is copied instead.
func (e *TypeError) Error() string {
	if e.Mode&iofs.ModeSymlink != 0 {
		return fmt.Sprintf("%s is a symlink (to %q): it has no contents to write (Options.FollowLink follows it)", e.Path, e.Link)
	}
	return fmt.Sprintf("%s is a %s: only regular files, directories and symlinks are copied", e.Path, e.TypeName())
}

// TypeName names the file's type: "named pipe", "socket", "character
// device", "block device", "symlink" or "special file".
func (e *TypeError) TypeName() string {
	m := e.Mode
	switch {
	case m&iofs.ModeSymlink != 0:
		return "symlink"
	case m&iofs.ModeNamedPipe != 0:
		return "named pipe"
	case m&iofs.ModeSocket != 0:
		return "socket"
	case m&iofs.ModeCharDevice != 0:
		return "character device"
	case m&iofs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// ExistsError reports a directory copied out of a sandbox onto a host
// path that exists (directories are never merged into): found before the
// copy, or, with Meanwhile, created by someone else while it ran (the
// copy then leaves nothing behind). It matches fs.ErrExist.
type ExistsError struct {
	// Path is the host path.
	Path string
	// Meanwhile: it appeared during the copy.
	Meanwhile bool
}

// Error names the path.
func (e *ExistsError) Error() string {
	if e.Meanwhile {
		return e.Path + " appeared meanwhile: directories are not merged"
	}
	return e.Path + " exists: directories are not merged"
}

// Is matches fs.ErrExist.
func (e *ExistsError) Is(target error) bool { return target == iofs.ErrExist }
