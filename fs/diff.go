package fs

import (
	"bytes"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// ChangeKind says how a path of a cow mount changed.
type ChangeKind string

// Kinds of change.
const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified"
	Deleted  ChangeKind = "deleted"
)

// Change is one changed path of a cow mount, relative to its root.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	Dir  bool       `json:"dir,omitempty"`
}

// opaqueXattr marks an overlay directory that hides its lower
// counterpart (user.* in a user namespace: the userxattr option).
const opaqueXattr = "user.overlay.opaque"

// Diff lists what an overlay's upper layer changed against its lower
// directory: files added, modified (content, mode or type) and deleted
// (whiteouts, and lower entries hidden by opaque directories). Paths are
// relative and slash-separated; the result is sorted. It reads only the
// host directories, so the sandbox may be running.
func Diff(lower, upper string) ([]Change, error) {
	var out []Change
	err := filepath.WalkDir(upper, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		lowerPath := filepath.Join(lower, rel)
		lfi, lerr := os.Lstat(lowerPath)
		inLower := lerr == nil
		switch {
		case isWhiteout(info):
			if inLower {
				out = append(out, deletedTree(lower, rel, lfi)...)
			}
		case d.IsDir():
			if !inLower || !lfi.IsDir() {
				if inLower {
					out = append(out, Change{Path: filepath.ToSlash(rel), Kind: Deleted})
				}
				out = append(out, Change{Path: filepath.ToSlash(rel), Kind: Added, Dir: true})
				return nil // descend: children are added
			}
			if isOpaque(p) {
				ents, _ := os.ReadDir(lowerPath)
				for _, e := range ents {
					if _, err := os.Lstat(filepath.Join(p, e.Name())); errors.Is(err, iofs.ErrNotExist) {
						efi, _ := e.Info()
						out = append(out, deletedTree(lower, filepath.Join(rel, e.Name()), efi)...)
					}
				}
			}
		default:
			switch {
			case !inLower:
				out = append(out, Change{Path: filepath.ToSlash(rel), Kind: Added})
			case lfi.IsDir():
				out = append(out, deletedTree(lower, rel, lfi)...)
				out = append(out, Change{Path: filepath.ToSlash(rel), Kind: Added})
			case changed(lowerPath, p, lfi, info):
				out = append(out, Change{Path: filepath.ToSlash(rel), Kind: Modified})
			}
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

func isWhiteout(fi iofs.FileInfo) bool {
	if fi.Mode()&iofs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	buf := make([]byte, 4)
	n, err := unix.Lgetxattr(dir, opaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// deletedTree lists rel and, for a directory, everything below it.
func deletedTree(lower, rel string, fi iofs.FileInfo) []Change {
	out := []Change{{Path: filepath.ToSlash(rel), Kind: Deleted, Dir: fi != nil && fi.IsDir()}}
	if fi != nil && fi.IsDir() {
		_ = filepath.WalkDir(filepath.Join(lower, rel), func(p string, d iofs.DirEntry, err error) error {
			if err == nil && p != filepath.Join(lower, rel) {
				r, _ := filepath.Rel(lower, p)
				out = append(out, Change{Path: filepath.ToSlash(r), Kind: Deleted, Dir: d.IsDir()})
			}
			return nil
		})
	}
	return out
}

// changed compares a copied-up file with its lower original: type, mode,
// symlink target, then content.
func changed(lowerPath, upperPath string, lfi, ufi iofs.FileInfo) bool {
	if lfi.Mode() != ufi.Mode() {
		return true
	}
	if lfi.Mode()&iofs.ModeSymlink != 0 {
		a, _ := os.Readlink(lowerPath)
		b, _ := os.Readlink(upperPath)
		return a != b
	}
	if lfi.Size() != ufi.Size() {
		return true
	}
	a, err1 := os.ReadFile(lowerPath)
	b, err2 := os.ReadFile(upperPath)
	return err1 != nil || err2 != nil || !bytes.Equal(a, b)
}

// ApplyChanges makes dst match the upper layer's changes: added and
// modified files and symlinks are copied from upper (with their mode),
// directories created, deleted paths removed.
func ApplyChanges(dst, upper string, changes []Change) error {
	for _, c := range changes {
		target := filepath.Join(dst, filepath.FromSlash(c.Path))
		if c.Kind == Deleted {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
			continue
		}
		src := filepath.Join(upper, filepath.FromSlash(c.Path))
		fi, err := os.Lstat(src)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.MkdirAll(target, fi.Mode().Perm()); err != nil {
				return err
			}
		case fi.Mode()&iofs.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err != nil {
				return err
			}
			_ = os.Remove(target)
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		default:
			if err := copyFile(src, target, fi.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	_ = os.Remove(dst)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
