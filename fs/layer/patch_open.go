//go:build linux

package layer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrFileChanged is wrapped by WritePatch's error for a file that changed
// while it was read (the sandbox was still writing): export again, or
// from a paused sandbox.
var ErrFileChanged = errors.New("file changed during export")

// ErrNotExportable is wrapped by WritePatch's error for a path that is
// neither a regular file nor a symlink (a FIFO, socket or device), or
// that is larger than PatchOptions.MaxFileSize.
var ErrNotExportable = errors.New("not exportable as a patch")

// patchRoot is one side of a patch (the lower or the upper directory),
// held as a directory fd: every path is opened beneath it.
type patchRoot struct {
	fd     int
	path   string // for error messages
	prefix string // "a/" or "b/", for error messages
}

func openPatchRoot(path, prefix string) (*patchRoot, error) {
	fd, err := openRootDir(path)
	if err != nil {
		return nil, fmt.Errorf("patch: failed to open %s: %w", path, err)
	}
	return &patchRoot{fd: fd, path: path, prefix: prefix}, nil
}

func (r *patchRoot) close() { unix.Close(r.fd) }

// name is how errors show rel: git-quoted, so a name cannot carry
// control bytes into a terminal or a log.
func (r *patchRoot) name(rel string) string { return gitQuote(r.prefix, rel) }

// patchSide is what one side of a patch holds at a path.
type patchSide struct {
	present bool
	mode    string // git's mode: 100644, 100755 or 120000
	data    []byte // a symlink's target, or a regular file's content when loaded
	file    *os.File
	size    int64
	big     bool // a regular file not loaded (over the text size): streamed from file
}

func (s *patchSide) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// open opens rel beneath the root (openBeneath: RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) with O_NOFOLLOW added.
func (r *patchRoot) open(rel string, flags int) (int, error) {
	fd, err := openBeneath(r.fd, rel, flags|unix.O_NOFOLLOW)
	switch {
	case err == unix.ELOOP || err == unix.EXDEV:
		return -1, fmt.Errorf("failed to open %s: a component is a symlink or leaves %s: %w", r.name(rel), r.path, err)
	case err != nil:
		return -1, fmt.Errorf("failed to open %s: %w", r.name(rel), err)
	}
	return fd, nil
}

// stat opens rel beneath the root as an O_PATH fd on the entry itself (a
// final symlink is not followed, a symlink on the way fails with ELOOP)
// and fstats it. It returns -1 and no error when rel does not exist.
func (r *patchRoot) stat(rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	pfd, err := r.open(rel, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) {
		return -1, st, nil
	}
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(pfd, &st); err != nil {
		unix.Close(pfd)
		return -1, st, fmt.Errorf("failed to stat %s: %w", r.name(rel), err)
	}
	return pfd, st, nil
}

// check fails, naming rel, unless it is absent, a symlink or a regular
// file of at most maxFile bytes, reached without a symlink.
func (r *patchRoot) check(rel string, maxFile int64) error {
	pfd, st, err := r.stat(rel)
	if err != nil || pfd < 0 {
		return err
	}
	unix.Close(pfd)
	return r.exportable(rel, &st, maxFile)
}

func (r *patchRoot) exportable(rel string, st *unix.Stat_t, maxFile int64) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil
	case unix.S_IFREG:
		if st.Size > maxFile {
			return fmt.Errorf("%s is %d bytes, over the patch limit of %d: %w", r.name(rel), st.Size, maxFile, ErrNotExportable)
		}
		return nil
	}
	return fmt.Errorf("%s is %s, not a regular file or symlink: %w", r.name(rel), fileType(st.Mode), ErrNotExportable)
}

// load reads what rel is beneath the root without following any symlink:
// absent, a symlink (its target, read from the O_PATH fd on the link
// itself, so it is the link that was checked), or a regular file, opened
// O_RDONLY|O_NONBLOCK (a FIFO swapped in cannot block the open) and
// checked to be the same inode. A regular file is read into data when it
// is at most maxText bytes; else it stays open, to be streamed (big).
// Anything else fails with ErrNotExportable naming the path.
func (r *patchRoot) load(rel string, maxText, maxFile int64) (patchSide, error) {
	pfd, st, err := r.stat(rel)
	if err != nil || pfd < 0 {
		return patchSide{}, err
	}
	defer unix.Close(pfd)
	if err := r.exportable(rel, &st, maxFile); err != nil {
		return patchSide{}, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax+1)
		n, err := unix.Readlinkat(pfd, "", buf)
		if err != nil {
			return patchSide{}, fmt.Errorf("failed to read the symlink %s: %w", r.name(rel), err)
		}
		if n > unix.PathMax {
			return patchSide{}, fmt.Errorf("symlink %s: target longer than %d bytes: %w", r.name(rel), unix.PathMax, ErrNotExportable)
		}
		return patchSide{present: true, mode: "120000", data: buf[:n:n], size: int64(n)}, nil
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return patchSide{}, err
	}
	f := os.NewFile(uintptr(fd), r.path+"/"+rel)
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil {
		f.Close()
		return patchSide{}, fmt.Errorf("failed to stat %s: %w", r.name(rel), err)
	}
	if st2.Dev != st.Dev || st2.Ino != st.Ino {
		f.Close()
		return patchSide{}, fmt.Errorf("%s was replaced while it was read: %w", r.name(rel), ErrFileChanged)
	}
	if err := r.exportable(rel, &st2, maxFile); err != nil {
		f.Close()
		return patchSide{}, err
	}
	s := patchSide{present: true, mode: "100644", file: f, size: st2.Size}
	if st2.Mode&0o100 != 0 {
		s.mode = "100755" // git keeps only the owner's execute bit
	}
	if s.size > maxText {
		s.big = true
		return s, nil
	}
	// One byte more than fstat said tells a file that grew: it is then
	// streamed like a big one, at the size fstat gave.
	buf := make([]byte, s.size+1)
	n, err := io.ReadFull(io.NewSectionReader(f, 0, s.size+1), buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		f.Close()
		return patchSide{}, fmt.Errorf("failed to read %s: %w", r.name(rel), err)
	}
	if int64(n) > s.size {
		s.big = true
		return s, nil
	}
	f.Close()
	s.file, s.data, s.size = nil, buf[:n:n], int64(n)
	return s, nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("of type %#o", mode&unix.S_IFMT)
}

// validPatchPath reports whether rel is a clean relative slash path, as
// Diff produces: no empty, "." or ".." component, no NUL.
func validPatchPath(rel string) bool {
	if rel == "" || strings.ContainsRune(rel, 0) {
		return false
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// inGitDir reports whether a component of rel is ".git" (in any case, as
// git's verify_path compares): git apply refuses such a patch whole, and
// patch(1) would write hooks that git later runs on the host.
func inGitDir(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}
