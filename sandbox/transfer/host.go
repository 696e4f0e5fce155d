//go:build linux

package transfer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/internal/atomicfile"
)

// The host's side of a copy out: what the sandbox sends is hostile input.

// sparseSizeKey is the PAX record in which layer.WriteTarFrom gives a sparse
// file's real size (layer.ExtractTar restores the holes).
const sparseSizeKey = "TENT.sparse.realsize"

// sanitizeTar copies the archive a sandbox sent for its directory src
// (hostile input) from r to w keeping only what is copied: directories,
// regular files and symlinks, with their permission bits (no set-id bits,
// no owner, no extended attributes; only the PAX record of a sparse
// file's size). It fails once the files' data pass limit bytes
// (ErrTooLarge) or the entries MaxEntries.
func sanitizeTar(r io.Reader, w io.Writer, src string, limit int64) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("reading the sandbox's archive of %s: %w", src, err)
		}
		if n >= MaxEntries {
			return fmt.Errorf("%s has more than %d entries: copy a smaller directory", src, MaxEntries)
		}
		out := &tar.Header{Typeflag: hdr.Typeflag, Name: hdr.Name, Mode: hdr.Mode & 0o777, ModTime: hdr.ModTime, Format: tar.FormatPAX}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeSymlink:
			out.Linkname = hdr.Linkname
		case tar.TypeReg:
			out.Size = hdr.Size
			if v, ok := hdr.PAXRecords[sparseSizeKey]; ok {
				out.PAXRecords = map[string]string{sparseSizeKey: v}
			}
			if total += hdr.Size; total > limit {
				return &tooLargeError{fmt.Sprintf("%s: the copy is larger than %d bytes", hdr.Name, limit)}
			}
		default:
			continue
		}
		if err := tw.WriteHeader(out); err != nil {
			return fmt.Errorf("%q: %w", hdr.Name, err)
		}
		if out.Size > 0 {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("%q: %w", hdr.Name, err)
			}
		}
	}
}

// hostTarget is where a copy out lands: name in the directory d, which
// is held open; it is written under a temporary name and renamed into
// place.
type hostTarget struct {
	d     *os.File
	name  string // final name in d
	shown string // for messages
}

// openHostTarget settles where a copy out writes: into dst when it is an
// existing directory (as dst/base), else dst itself (its directory must
// exist).
func openHostTarget(dst, base string, srcIsDir bool) (*hostTarget, error) {
	if base == "/" || base == "." || base == ".." {
		base = ""
	}
	parent, name := filepath.Dir(filepath.Clean(dst)), filepath.Base(filepath.Clean(dst))
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		if base == "" {
			return nil, fmt.Errorf("%s is a directory: name the destination itself, such as %s", dst, filepath.Join(dst, "copy"))
		}
		parent, name = dst, base
	case err == nil && srcIsDir:
		return nil, fmt.Errorf("cannot copy a directory over %s, which is not a directory", dst)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	case err != nil && strings.HasSuffix(dst, "/"):
		return nil, fmt.Errorf("the destination directory %s does not exist", dst)
	}
	d, err := os.OpenFile(parent, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	t := &hostTarget{d: d, name: name, shown: filepath.Join(parent, name)}
	// What a killed copy left here (a temporary nobody holds locked).
	_, _ = CopyTemps.Clean(t.fd())
	if srcIsDir {
		var st unix.Stat_t
		if err := unix.Fstatat(t.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			d.Close()
			return nil, &ExistsError{Path: t.shown}
		}
	}
	return t, nil
}

func (t *hostTarget) fd() int { return int(t.d.Fd()) }

func (t *hostTarget) close() { t.d.Close() }

// CopyTemps names the temporaries a copy out writes beside its
// destination (see internal/atomicfile): .tent-cp-HEX.tmp, files and
// directories, locked while they are written. Each copy out removes the
// ones a killed copy left in its destination's directory.
var CopyTemps = atomicfile.Options{Prefix: ".tent-cp-", Suffix: ".tmp", Dirs: true}

// file writes a regular file: a temporary beside the target (created
// O_EXCL|O_NOFOLLOW, locked), filled by fill, given perm, synced and
// renamed over the target (a symlink there is replaced, never
// followed), the directory synced; a failure removes the temporary.
func (t *hostTarget) file(perm os.FileMode, fill func(io.Writer) error) error {
	f, err := atomicfile.CreateAt(t.fd(), t.name, perm&0o777, CopyTemps)
	if err != nil {
		return &os.PathError{Op: "create", Path: t.shown, Err: errnoOf(err)}
	}
	if err := fill(f); err != nil {
		f.Abort()
		return err
	}
	if err := f.Commit(); err != nil {
		return &os.PathError{Op: "rename", Path: t.shown, Err: errnoOf(err)}
	}
	return nil
}

// symlink creates a symlink to target (a link, never followed).
func (t *hostTarget) symlink(target string) error {
	// Made in a locked temporary directory beside the target, renamed
	// over it: a kill leaves only that directory, which the next copy
	// removes.
	err := atomicfile.PlaceAt(t.fd(), t.name, CopyTemps, func(dirfd int, name string) error {
		if err := unix.Symlinkat(target, dirfd, name); err != nil {
			return &os.PathError{Op: "symlink", Path: t.shown, Err: err}
		}
		return nil
	})
	var le *os.LinkError
	if errors.As(err, &le) {
		return &os.PathError{Op: "rename", Path: t.shown, Err: le.Err}
	}
	return err
}

// dir extracts the archive that fill writes into a temporary directory
// (locked while it is filled; layer.ExtractTar: every entry created beneath
// it, no symlink followed) and renames it to the target, which must not
// exist meanwhile.
func (t *hostTarget) dir(perm os.FileMode, fill func(io.Writer) error) error {
	o := CopyTemps
	o.NoReplace = true
	d, err := atomicfile.MkdirAt(t.fd(), o)
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: t.shown, Err: errnoOf(err)}
	}
	// The temporary directory held open, by its /proc name (its "."
	// component: ExtractTar does not follow a final symlink).
	tmpPath := fmt.Sprintf("/proc/self/fd/%d/.", d.Fd())
	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := layer.ExtractTar(pr, tmpPath)
		if err == nil {
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err)
		extracted <- err
	}()
	err = fill(pw)
	pw.CloseWithError(err)
	if xerr := <-extracted; err == nil || errors.Is(err, io.ErrClosedPipe) {
		if xerr != nil {
			err = xerr
		}
	}
	if err != nil {
		d.Abort()
		return err
	}
	if err := d.Commit(t.name, perm&0o777); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return &ExistsError{Path: t.shown, Meanwhile: true}
		}
		return &os.PathError{Op: "rename", Path: t.shown, Err: errnoOf(err)}
	}
	return nil
}

// errnoOf is the system error inside err (a *os.PathError, *os.LinkError
// or *os.SyscallError of the temporary's), for an error naming the
// destination instead.
func errnoOf(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
