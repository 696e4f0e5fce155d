//go:build linux

package layer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// xattrPrefix is how archive/tar carries extended attributes (PAX).
const xattrPrefix = "SCHILY.xattr."

// maxArchivePath bounds the length of an archived entry's name (Go's
// archive/tar reads PAX headers of at most 1 MiB).
const maxArchivePath = 256 << 10

// WriteTar archives the contents of dir (not dir itself); see
// WriteTarFrom. dir itself is the caller's path (its last component is
// not followed).
func WriteTar(w io.Writer, dir string) error {
	fd, err := openRootDir(dir)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	return WriteTarFrom(w, f)
}

// WriteTarFrom archives the contents of the open directory dir:
// directories, regular files, symlinks, overlay whiteouts (character
// devices 0/0) and the user.overlay.* attributes that mark opaque
// directories. Other special files are skipped, and so are the contents
// of directories on another filesystem than dir (mount points are
// archived empty).
//
// The tree may belong to a sandbox that changes it meanwhile: entries are
// reached descriptor-relative from dir, never through a symlink (a
// symlink's target text is archived, never followed); regular files are
// opened O_NOFOLLOW|O_NONBLOCK and checked by fstat (a FIFO swapped in is
// skipped, not read), and archived at the size fstat gave. Files with
// holes are archived sparse (see sparseSizeKey; ExtractTar restores
// them), so that their cost is their data, not their apparent size.
// Trees up to MaxDepth levels deep are archived; deeper ones, names
// longer than 256 KiB and files of more than MaxSparseSegments data
// extents fail with an error naming the path.
func WriteTarFrom(w io.Writer, dir *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: dir.Name(), Err: err}
	}
	a := &archiver{tw: tar.NewWriter(w), dev: st.Dev, root: dir.Name(), buf: make([]byte, copyChunk)}
	if err := a.dir(int(dir.Fd()), "", 0); err != nil {
		return err
	}
	return a.tw.Close()
}

// WriteTarFromExcept is [WriteTarFrom] restricted to dir's own
// filesystem, less what except names: an entry whose relative path
// (slash-separated, no leading slash) except returns true for is left
// out with everything beneath it; so are a mount point's contents, as
// WriteTarFrom leaves them out, and files on another filesystem than
// dir (files bound onto it). It archives a filesystem that other mounts
// sit on, such as a sandbox's root tmpfs, without them.
func WriteTarFromExcept(w io.Writer, dir *os.File, except func(rel string) bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: dir.Name(), Err: err}
	}
	a := &archiver{tw: tar.NewWriter(w), dev: st.Dev, root: dir.Name(), buf: make([]byte, copyChunk), except: except}
	if err := a.dir(int(dir.Fd()), "", 0); err != nil {
		return err
	}
	return a.tw.Close()
}

type archiver struct {
	tw   *tar.Writer
	dev  uint64
	root string
	buf  []byte
	// except, when not nil, leaves out the entries it names and files
	// on another filesystem (see WriteTarFromExcept).
	except func(rel string) bool
}

func (a *archiver) fail(op, rel string, err error) error {
	return fmt.Errorf("archiving %s: %w", a.root, &os.PathError{Op: op, Path: rel, Err: err})
}

func header(name string, st *unix.Stat_t, typ byte) *tar.Header {
	return &tar.Header{
		Name:     name,
		Typeflag: typ,
		Mode:     int64(st.Mode & 0o7777),
		Uid:      int(st.Uid),
		Gid:      int(st.Gid),
		ModTime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
	}
}

func (a *archiver) dir(fd int, rel string, depth int) error {
	if depth > MaxDepth {
		return a.fail("walk", rel, ErrTooDeep)
	}
	names, err := readNames(fd)
	if err != nil {
		return a.fail("readdir", rel, err)
	}
	for _, n := range names {
		r := joinRel(rel, n)
		if len(r) > maxArchivePath {
			return a.fail("archive", r[:64]+"...", unix.ENAMETOOLONG)
		}
		st, err := lstatAt(fd, n)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return a.fail("fstatat", r, err)
		}
		if a.except != nil && (a.except(r) || st.Dev != a.dev && st.Mode&unix.S_IFMT != unix.S_IFDIR) {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = a.subdir(fd, n, r, depth)
		case unix.S_IFLNK:
			target, lerr := readlinkAt(fd, n)
			if lerr == unix.ENOENT || lerr == unix.EINVAL { // gone, or no longer a link
				continue
			}
			if lerr != nil {
				return a.fail("readlinkat", r, lerr)
			}
			hdr := header(r, &st, tar.TypeSymlink)
			hdr.Linkname = target
			err = a.tw.WriteHeader(hdr)
		case unix.S_IFREG:
			err = a.file(fd, n, r)
		case unix.S_IFCHR:
			if isWhiteoutStat(&st) {
				err = a.tw.WriteHeader(header(r, &st, tar.TypeChar))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *archiver) subdir(fd int, n, r string, depth int) error {
	cfd, err := openDir(fd, n)
	if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR {
		return nil // replaced meanwhile: never followed
	}
	if err != nil {
		return a.fail("openat2", r, err)
	}
	defer unix.Close(cfd)
	var st unix.Stat_t
	if err := unix.Fstat(cfd, &st); err != nil {
		return a.fail("fstat", r, err)
	}
	hdr := header(r+"/", &st, tar.TypeDir)
	if isOpaque(cfd) {
		hdr.PAXRecords = map[string]string{xattrPrefix + opaqueXattr: "y"}
	}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if st.Dev != a.dev {
		return nil
	}
	return a.dir(cfd, r, depth+1)
}

func (a *archiver) file(dirfd int, n, r string) error {
	f, err := openRegular(dirfd, n)
	if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENXIO || errors.Is(err, errNotRegular) {
		return nil // replaced meanwhile
	}
	if err != nil {
		return a.fail("open", r, err)
	}
	defer f.Close()
	size := f.St.Size
	segs, holes, err := dataSegments(f.Fd, size)
	if err != nil {
		return a.fail("archive", r, err)
	}
	hdr := header(r, &f.St, tar.TypeReg)
	if !holes {
		hdr.Size = size
		if err := a.tw.WriteHeader(hdr); err != nil {
			return err
		}
		return a.copyRange(f.Fd, r, 0, size)
	}
	m := encodeSparseMap(segs)
	hdr.Size = int64(len(m))
	for _, s := range segs {
		hdr.Size += s.len
	}
	hdr.PAXRecords = map[string]string{sparseSizeKey: strconv.FormatInt(size, 10)}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := a.tw.Write(m); err != nil {
		return err
	}
	for _, s := range segs {
		if err := a.copyRange(f.Fd, r, s.off, s.len); err != nil {
			return err
		}
	}
	return nil
}

// copyRange writes n bytes of fd from off into the archive; a file that
// shrank meanwhile is padded with zeros.
func (a *archiver) copyRange(fd int, r string, off, n int64) error {
	for n > 0 {
		k, err := unix.Pread(fd, a.buf[:min(int64(len(a.buf)), n)], off)
		if err != nil {
			return a.fail("pread", r, err)
		}
		if k == 0 {
			clear(a.buf)
			k = int(min(int64(len(a.buf)), n))
		}
		if _, err := a.tw.Write(a.buf[:k]); err != nil {
			return err
		}
		off, n = off+int64(k), n-int64(k)
	}
	return nil
}

// ExtractTar unpacks what WriteTar wrote into dir, which must exist.
// Every entry must be a plain relative path (no "..", not absolute) and
// is created descriptor-relative beneath dir, one component at a time,
// refusing symlinks on the way: a symlink in the archive is created with
// its target text and never followed, so neither a crafted name nor a
// link can write outside dir or through a link (ELOOP). Files are created
// anew (O_EXCL|O_NOFOLLOW) with their permission bits only; runs of
// all-zero 4 KiB blocks are skipped by seeking and the file finished with
// ftruncate, so disk use is bounded by the non-zero content; sparse
// entries are restored from their map. Trees deeper than MaxDepth fail.
func ExtractTar(r io.Reader, dir string) error {
	rootfd, err := openRootDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(rootfd)
	c := &dirCursor{Root: rootfd, Create: true}
	defer c.Close()
	buf := make([]byte, copyChunk)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extracting into %s: %w", dir, err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the directory", hdr.Name)
		}
		comps, err := splitRel(name)
		if err != nil {
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		if err := extractEntry(c, comps, name, hdr, tr, buf); err != nil {
			return fmt.Errorf("extracting into %s: %w", dir, err)
		}
	}
}

func extractEntry(c *dirCursor, comps []string, name string, hdr *tar.Header, tr io.Reader, buf []byte) error {
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeChar:
	default:
		return nil
	}
	pfd, err := c.Dir(comps[:len(comps)-1])
	if err != nil {
		return err
	}
	base := comps[len(comps)-1]
	mode := uint32(hdr.Mode) & 0o777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "mkdirat", Path: name, Err: err}
		}
		fd, err := openDir(pfd, base)
		if err != nil {
			return &os.PathError{Op: "openat2", Path: name, Err: err}
		}
		defer unix.Close(fd)
		if err := unix.Fchmod(fd, mode); err != nil {
			return &os.PathError{Op: "fchmod", Path: name, Err: err}
		}
		if v, ok := hdr.PAXRecords[xattrPrefix+opaqueXattr]; ok {
			if err := unix.Fsetxattr(fd, opaqueXattr, []byte(v), 0); err != nil {
				return &os.PathError{Op: "setxattr", Path: name, Err: err}
			}
		}
	case tar.TypeReg:
		return extractFile(pfd, base, name, mode, hdr, tr, buf)
	case tar.TypeSymlink:
		if err := replaceAt(pfd, base, name); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return &os.PathError{Op: "symlinkat", Path: name, Err: err}
		}
	case tar.TypeChar:
		if hdr.Devmajor != 0 || hdr.Devminor != 0 {
			return nil
		}
		// A whiteout: Linux 5.8 lets users create it.
		if err := unix.Mknodat(pfd, base, unix.S_IFCHR, 0); err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "mknod", Path: name, Err: err}
		}
	}
	return nil
}

func extractFile(pfd int, base, name string, mode uint32, hdr *tar.Header, tr io.Reader, buf []byte) error {
	if err := replaceAt(pfd, base, name); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: name, Err: err}
	}
	err = fillFile(fd, hdr, tr, buf)
	if err == nil {
		err = os.NewSyscallError("fchmod", unix.Fchmod(fd, mode))
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = os.NewSyscallError("close", cerr)
	}
	if err != nil {
		return &os.PathError{Op: "extract", Path: name, Err: err}
	}
	return nil
}

func fillFile(fd int, hdr *tar.Header, tr io.Reader, buf []byte) error {
	size := hdr.Size
	if v, ok := hdr.PAXRecords[sparseSizeKey]; ok {
		real, err := strconv.ParseInt(v, 10, 64)
		if err != nil || real < 0 {
			return fmt.Errorf("bad %s %q: %w", sparseSizeKey, v, unix.EINVAL)
		}
		segs, _, err := decodeSparseMap(tr, real, hdr.Size)
		if err != nil {
			return err
		}
		for _, s := range segs {
			if err := writeSkippingZeros(fd, tr, s.off, s.len, buf); err != nil {
				return err
			}
		}
		size = real
	} else if err := writeSkippingZeros(fd, tr, 0, size, buf); err != nil {
		return err
	}
	return os.NewSyscallError("ftruncate", unix.Ftruncate(fd, size))
}
