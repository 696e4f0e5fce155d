// Package secretstore keeps the values of a backend's secrets: one file,
// mode 0600, in the backend's state directory. A sandbox's network policy
// names its secrets (netpolicy.Secret: name, hosts, placement) and never
// holds a value; its proxy asks the store (a netpolicy.SecretSource) each
// time a request goes out, so a rotation ([Store.Set]) or a revocation
// ([Store.Delete]) is one write, seen by the next request of every
// sandbox that names the secret, whichever process supervises it.
//
// The file is JSON, an object of names and values, written with
// internal/atomicfile (a temporary beside it, fsync'd, renamed) under an
// exclusive lock of its own (secrets.lock), so that concurrent writers
// never lose each other's writes. It is read beneath a descriptor of the
// directory, never through a symbolic link, and refused ([ErrRefused])
// unless it is a regular file owned by the caller and readable by its
// owner only. A reader keeps what it parsed while the file's identity
// (device, inode, size, modification time) stays the same.
package secretstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/netpolicy"
)

// FileName is the store's file in its directory; LockName the file its
// writers lock.
const (
	FileName = "secrets"
	LockName = "secrets.lock"
)

// Bounds of a store: its entries, and its file.
const (
	MaxEntries = 1024
	maxBytes   = 24 << 20 // MaxEntries values of 16 KiB, escaped
	maxNameLen = 128
)

// ErrRefused is wrapped by the error of a read or a write of a store file
// that is not safe to use: a symbolic link, not a regular file, owned by
// another user, or readable or writable by group or others.
var ErrRefused = errors.New("secret store refused")

// ErrFull is returned by a Set that would make the store hold more than
// MaxEntries secrets.
var ErrFull = errors.New("secret store full")

// tmpOptions name the store's temporaries.
var tmpOptions = atomicfile.Options{Prefix: ".secrets-tmp-"}

// Store is the secret store of one directory. Its methods are safe for
// concurrent use, by this process and others.
type Store struct {
	dir string

	mu    sync.Mutex
	id    fileID // of the file cached parsed
	cache map[string]string
}

// fileID tells a file's versions apart without reading it.
type fileID struct {
	dev, ino  uint64
	size      int64
	sec, nsec int64
}

// Open returns the store of directory dir (the backend's state
// directory). Nothing is read or created until it is used.
func Open(dir string) *Store { return &Store{dir: dir} }

// Path is the store's file.
func (s *Store) Path() string { return filepath.Join(s.dir, FileName) }

// LookupSecret returns the value of secret name (netpolicy.SecretSource):
// none when the store does not hold it or cannot be read.
func (s *Store) LookupSecret(name string) (string, bool) {
	v, ok, err := s.Get(name)
	return v, ok && err == nil
}

// Get returns the value of secret name.
func (s *Store) Get(name string) (string, bool, error) {
	m, err := s.read()
	if err != nil {
		return "", false, err
	}
	v, ok := m[name]
	return v, ok, nil
}

// List returns the names of the secrets the store holds, sorted; never a
// value.
func (s *Store) List() ([]string, error) {
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(m)), nil
}

// Set gives secret name the value v (netpolicy.ValidateSecretValue), in
// force from the next request of every sandbox that names it.
func (s *Store) Set(name, v string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := netpolicy.ValidateSecretValue(v); err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return s.update(func(m map[string]string) (bool, error) {
		if _, ok := m[name]; !ok && len(m) >= MaxEntries {
			return false, fmt.Errorf("%w: it holds %d secrets", ErrFull, MaxEntries)
		}
		if m[name] == v {
			return false, nil
		}
		m[name] = v
		return true, nil
	})
}

// Delete removes secret name (a revocation: from the next request on, no
// sandbox gets its value), reporting whether the store held it.
func (s *Store) Delete(name string) (bool, error) {
	var held bool
	err := s.update(func(m map[string]string) (bool, error) {
		_, held = m[name]
		delete(m, name)
		return held, nil
	})
	return held, err
}

// ValidName checks a secret's name in a store: 1 to 128 letters, digits,
// '_', '.' or '-'.
func ValidName(name string) error {
	ok := name != "" && len(name) <= maxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return fmt.Errorf("secret name %q: want 1 to %d letters, digits, '_', '.' or '-'", name, maxNameLen)
	}
	return nil
}

// update applies change to the store's contents under its writers' lock,
// and writes them when change reports a change.
func (s *Store) update(change func(map[string]string) (bool, error)) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	d, err := os.OpenFile(s.dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	dirfd := int(d.Fd())
	unlock, err := s.lock(dirfd)
	if err != nil {
		return err
	}
	defer unlock()
	_, _ = tmpOptions.Clean(dirfd) // what a killed writer left
	m, _, err := s.readAt(dirfd)
	if err != nil {
		return err
	}
	m = maps.Clone(m)
	if m == nil {
		m = map[string]string{}
	}
	if changed, err := change(m); err != nil || !changed {
		return err
	}
	return atomicfile.WriteFileAt(dirfd, FileName, 0o600, tmpOptions, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(m)
	})
}

// lock takes the writers' lock (flock of LockName).
func (s *Store) lock(dirfd int) (func(), error) {
	fd, err := unix.Openat(dirfd, LockName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, s.openErr(LockName, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := s.check(filepath.Join(s.dir, LockName), &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("locking %s: %w", filepath.Join(s.dir, LockName), err)
	}
	return func() { unix.Close(fd) }, nil
}

// read returns the store's contents, parsed again only when the file
// changed. The map returned is not to be changed.
func (s *Store) read() (map[string]string, error) {
	// Asked per proxied request: a bare descriptor (no *os.File), and
	// with the file unchanged one fstatat and no read.
	dirfd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: s.dir, Err: err}
	}
	defer unix.Close(dirfd)
	m, _, err := s.readAt(dirfd)
	return m, err
}

// readAt reads the store's file beneath dirfd (a store without a file is
// empty).
func (s *Store) readAt(dirfd int) (map[string]string, fileID, error) {
	path := s.Path()
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, FileName, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil, fileID{}, nil
	}
	if err != nil {
		return nil, fileID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := s.check(path, &st); err != nil {
		return nil, fileID{}, err
	}
	s.mu.Lock()
	if id := idOf(&st); id == s.id && s.cache != nil {
		m := s.cache
		s.mu.Unlock()
		return m, id, nil
	}
	s.mu.Unlock()
	fd, err := unix.Openat(dirfd, FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileID{}, s.openErr(FileName, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileID{}, err
	}
	if err := s.check(path, &st); err != nil {
		return nil, fileID{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fileID{}, err
	}
	if len(data) > maxBytes {
		return nil, fileID{}, fmt.Errorf("secret store %s: larger than %d bytes", path, maxBytes)
	}
	m := map[string]string{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fileID{}, fmt.Errorf("secret store %s: %w", path, err)
	}
	id := idOf(&st)
	s.mu.Lock()
	s.id, s.cache = id, m
	s.mu.Unlock()
	return m, id, nil
}

// check refuses a store file (or its lock) that is not a regular file
// owned by the caller and readable by its owner only.
func (s *Store) check(path string, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%w: %s is a symbolic link", ErrRefused, path)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: %s is not a regular file", ErrRefused, path)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrRefused, path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %#o: it must be readable by its owner only (0600)", ErrRefused, path, st.Mode&0o777)
	}
	return nil
}

// openErr reports a failed open of name: a symbolic link (O_NOFOLLOW) is
// refused.
func (s *Store) openErr(name string, err error) error {
	path := filepath.Join(s.dir, name)
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("%w: %s is a symbolic link", ErrRefused, path)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, sec: int64(st.Mtim.Sec), nsec: int64(st.Mtim.Nsec)}
}
