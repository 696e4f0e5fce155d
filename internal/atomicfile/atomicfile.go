// Package atomicfile is tent's one atomic file writer: a file that
// replaces another is written under a temporary name beside it and
// renamed into place, so that a full disk, a crash or a kill leaves
// either the old file or the whole new one, never a mix.
//
// The protocol, for every writer that replaces a file a user had:
//
//   - The temporary is created in the destination's own directory,
//     beneath a descriptor of that directory held for the whole write
//     (openat, O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), under a name made
//     of the writer's prefix, random hex digits and its suffix.
//   - It is locked (flock LOCK_EX) for as long as it is written: a
//     temporary that nobody holds locked is the leftover of a killed
//     writer, and [Options.Clean] removes it; one that is locked is
//     being written and is left alone.
//   - It is written whole, given its owner (when asked) and mode with
//     fchown and fchmod (the umask does not apply), fsync'd, renamed over
//     the destination beneath the same directory descriptor (renameat,
//     which replaces a symlink there and never follows it), and the
//     directory is fsync'd.
//   - On any error before the rename the temporary is removed.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultPrefix begins a temporary's name when [Options].Prefix is empty.
const DefaultPrefix = ".tent-tmp-"

// maxHex bounds the random part of the names Match accepts (the names it
// makes have 16 digits; os.CreateTemp's, of older tents, up to 10).
const maxHex = 32

// Options name a writer's temporaries: Prefix, 16 random hex digits,
// Suffix. Each kind of writer has its own, so that its next run removes
// only its own leftovers.
type Options struct {
	// Prefix begins the temporaries' names (DefaultPrefix when empty). It
	// should begin with a dot, hiding them from ls.
	Prefix string
	// Suffix ends them.
	Suffix string
	// UID and GID, when Chown is set, are the owner the file is given
	// (at creation, so that a refusal comes before anything is written).
	Chown    bool
	UID, GID int
	// Dirs has Clean remove stale temporary directories of the pattern
	// too (those MkdirAt makes), with their contents; without it, Clean
	// leaves every directory alone.
	Dirs bool
	// NoReplace refuses to replace an existing destination: the commit
	// fails with EEXIST (Linux; elsewhere it is checked before the
	// rename).
	NoReplace bool
}

func (o Options) prefix() string {
	if o.Prefix == "" {
		return DefaultPrefix
	}
	return o.Prefix
}

// TempName is a fresh temporary name of o's pattern.
func (o Options) TempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return o.prefix() + hex.EncodeToString(b[:]) + o.Suffix
}

// Match reports whether name is one of o's temporaries: its prefix, 1 to
// 32 hex (or decimal) digits, its suffix, nothing else.
func (o Options) Match(name string) bool {
	mid, ok := strings.CutPrefix(name, o.prefix())
	if !ok {
		return false
	}
	if mid, ok = strings.CutSuffix(mid, o.Suffix); !ok || mid == "" || len(mid) > maxHex {
		return false
	}
	for _, c := range mid {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// File is a temporary being written, to be renamed over its destination
// by Commit or removed by Abort. Write to it through its *os.File (and
// end it with Commit or Abort, not Close).
type File struct {
	*os.File // the temporary, open for writing and locked
	dirfd    int
	ownDir   *os.File // the directory, when Create opened it
	tmp      string   // the temporary's name in the directory
	name     string   // the destination's
	perm     os.FileMode
	o        Options
	done     bool
	renamed  bool
}

// CreateAt creates a temporary for the file name of the directory dirfd,
// which the caller holds open until Commit or Abort; Commit gives it perm
// (permission and set-id bits, the umask ignored). A temporary that a
// cleaner removed between its creation and its locking is made again
// under another name.
func CreateAt(dirfd int, name string, perm os.FileMode, o Options) (*File, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, &os.PathError{Op: "create", Path: name, Err: unix.EINVAL}
	}
	for try := 0; ; try++ {
		tmp := o.TempName()
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if (errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EINTR)) && try < 16 {
			continue // (interrupted: perhaps created, so another name)
		}
		if err != nil {
			return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
		}
		f := os.NewFile(uintptr(fd), tmp)
		held, err := lockCreated(dirfd, fd, tmp)
		if err != nil || !held {
			f.Close()
			if err != nil {
				_ = unix.Unlinkat(dirfd, tmp, 0)
				return nil, err
			}
			if try < 16 {
				continue // a cleaner took it: another name
			}
			return nil, &os.PathError{Op: "lock", Path: tmp, Err: unix.EAGAIN}
		}
		if o.Chown {
			if err := unix.Fchown(fd, o.UID, o.GID); err != nil {
				_ = unix.Unlinkat(dirfd, tmp, 0)
				f.Close()
				return nil, &os.PathError{Op: "chown", Path: name, Err: err}
			}
		}
		return &File{File: f, dirfd: dirfd, tmp: tmp, name: name, perm: perm, o: o}, nil
	}
}

// lockCreated locks the temporary fd just created as tmp in dirfd and
// checks it is still there (a cleaner that locked it first removes it):
// held is false when it is not.
func lockCreated(dirfd, fd int, tmp string) (held bool, err error) {
	// A file system without flock (some FUSE ones) writes unlocked:
	// Clean cannot lock such a temporary either, and leaves it.
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return false, &os.PathError{Op: "fstat", Path: tmp, Err: err}
	}
	if err := unix.Fstatat(dirfd, tmp, &b, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(&a, &b) {
		return false, nil
	}
	return true, nil
}

func sameFile(a, b *unix.Stat_t) bool {
	return uint64(a.Dev) == uint64(b.Dev) && uint64(a.Ino) == uint64(b.Ino)
}

// Create is CreateAt for path, whose directory it opens (following the
// symlinks of the directory's path, as the caller's path) and closes
// once the file is committed or aborted.
func Create(path string, perm os.FileMode, o Options) (*File, error) {
	d, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f, err := CreateAt(int(d.Fd()), filepath.Base(path), perm, o)
	if err != nil {
		d.Close()
		return nil, err
	}
	f.ownDir = d
	return f, nil
}

// TempName is the temporary's name in its directory.
func (f *File) TempName() string { return f.tmp }

// Commit makes the temporary the destination: it sets its mode, syncs
// it, renames it over the destination (a symlink there is replaced,
// never followed) and syncs the directory. On an error before the
// rename, the temporary is removed and the destination is as it was.
func (f *File) Commit() error {
	if f.done {
		return &os.PathError{Op: "commit", Path: f.name, Err: os.ErrClosed}
	}
	err := f.File.Chmod(f.perm)
	if err == nil {
		err = f.File.Sync()
	}
	if err == nil {
		err = rename(f.dirfd, f.tmp, f.name, f.o.NoReplace)
	}
	if err != nil {
		f.Abort()
		return err
	}
	f.done, f.renamed = true, true
	err = SyncDir(f.dirfd)
	// Closed last: the temporary stays locked until it is in place.
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	f.closeDir()
	return err
}

// Renamed reports whether Commit renamed the temporary into place: the
// new file is the destination, and an error Commit returned came after
// (syncing the directory, closing the file), not before.
func (f *File) Renamed() bool { return f.renamed }

// Abort removes the temporary (once committed, it does nothing).
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = unix.Unlinkat(f.dirfd, f.tmp, 0)
	f.File.Close()
	f.closeDir()
}

func (f *File) closeDir() {
	if f.ownDir != nil {
		f.ownDir.Close()
		f.ownDir = nil
	}
}

// SyncDir fsyncs the directory dirfd (which may be an O_PATH
// descriptor); a file system that cannot sync directories, or a
// directory the caller may not read, is not an error.
func SyncDir(dirfd int) error {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: ".", Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil && !errors.Is(err, unix.EINVAL) {
		return os.NewSyscallError("fsync (directory)", err)
	}
	return nil
}

// WriteFileAt writes the file name of the directory dirfd atomically
// with fill's output (see the package documentation).
func WriteFileAt(dirfd int, name string, perm os.FileMode, o Options, fill func(io.Writer) error) error {
	f, err := CreateAt(dirfd, name, perm, o)
	if err != nil {
		return err
	}
	if err := fill(f.File); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// WriteFile writes data to path atomically (see the package
// documentation), with mode perm.
func WriteFile(path string, data []byte, perm os.FileMode, o Options) error {
	f, err := Create(path, perm, o)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// Clean removes from the directory dirfd the temporaries of o's pattern
// that no writer holds (left by a killed one): only regular files (and,
// on Linux with Dirs, directories made by [MkdirAt]) whose name matches exactly,
// never through a symlink. A temporary is removed only once its lock is
// taken and it is still the entry of that name, so a writer's live
// temporary is never removed. It returns how many it removed; entries it
// cannot open or lock are left, silently. It reads the first
// [MaxCleanScan] names of the directory at most: what a sandbox can fill
// (a volume, a directory inside it) costs each write a bounded time, and
// a leftover past them stays.
func (o Options) Clean(dirfd int) (int, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: ".", Err: err}
	}
	d := os.NewFile(uintptr(fd), ".")
	defer d.Close()
	// Removed batch by batch as the directory is read, so that what is
	// held is bounded whatever the directory holds (a sandbox's volume may
	// hold any number of names of the pattern).
	removed := 0
	for seen := 0; seen < MaxCleanScan; {
		names, err := d.Readdirnames(1024)
		seen += len(names)
		for _, n := range names {
			if o.Match(n) && removeStale(dirfd, n, o.Dirs) {
				removed++
			}
		}
		if errors.Is(err, io.EOF) || len(names) == 0 {
			break
		}
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// MaxCleanScan bounds the names [Options.Clean] reads in one call.
const MaxCleanScan = 1 << 16

// removeStale removes the temporary name of dirfd when it is a regular
// file (or, with dirs, a directory: see removeStaleDir) that nobody
// holds locked.
func removeStale(dirfd int, name string, dirs bool) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return dirs && removeStaleDir(dirfd, name, &st)
	default:
		return false
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var held unix.Stat_t
	if unix.Fstat(fd, &held) != nil || held.Mode&unix.S_IFMT != unix.S_IFREG || !sameFile(&st, &held) {
		return false
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // being written
	}
	// Still that file at that name (not renamed into place meanwhile)?
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !sameFile(&st, &held) {
		return false
	}
	return unix.Unlinkat(dirfd, name, 0) == nil
}
