package fs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// xattrPrefix is how archive/tar carries extended attributes (PAX).
const xattrPrefix = "SCHILY.xattr."

// WriteTar archives the contents of dir (not dir itself): directories,
// regular files, symlinks, overlay whiteouts (character devices 0/0) and
// the user.overlay.* attributes that mark opaque directories. Other
// special files are skipped.
func WriteTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&iofs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if fi.Mode()&(iofs.ModeNamedPipe|iofs.ModeSocket) != 0 || (fi.Mode()&iofs.ModeDevice != 0 && !isWhiteout(fi)) {
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
			if isOpaque(p) {
				hdr.PAXRecords = map[string]string{xattrPrefix + opaqueXattr: "y"}
			}
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ExtractTar unpacks what WriteTar wrote into dir, which must exist.
// Every entry must be a local path (no "..", not absolute) and is created
// through an os.Root, so neither a crafted name nor a symlink in the
// archive can write outside dir.
func ExtractTar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the directory", hdr.Name)
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			if v, ok := hdr.PAXRecords[xattrPrefix+opaqueXattr]; ok {
				if err := setXattr(root, name, opaqueXattr, v); err != nil {
					return err
				}
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeChar:
			if hdr.Devmajor != 0 || hdr.Devminor != 0 {
				continue
			}
			if err := whiteoutAt(root, name); err != nil {
				return err
			}
		}
	}
}

// parentFD opens the parent directory of name inside root.
func parentFD(root *os.Root, name string) (*os.File, string, error) {
	dir, base := path.Split(filepath.ToSlash(name))
	if dir == "" {
		dir = "."
	}
	f, err := root.Open(strings.TrimSuffix(dir, "/"))
	return f, base, err
}

// whiteoutAt creates an overlay whiteout (a 0/0 character device; Linux
// 5.8 lets users create it).
func whiteoutAt(root *os.Root, name string) error {
	f, base, err := parentFD(root, name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Mknodat(int(f.Fd()), base, unix.S_IFCHR, 0); err != nil && !errors.Is(err, syscall.EEXIST) {
		return &os.PathError{Op: "mknod", Path: name, Err: err}
	}
	return nil
}

func setXattr(root *os.Root, name, attr, value string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), attr, []byte(value), 0); err != nil {
		return &os.PathError{Op: "setxattr", Path: name, Err: err}
	}
	return nil
}
