//go:build linux

package transfer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/sandbox"
)

// kind is what a copy out does with its source.
type kind int

const (
	kindFile    kind = iota
	kindFollow       // a file, or a directory when the read says EISDIR
	kindSymlink      // copied as a link
	kindDir          // archived
)

// source stats src inside the sandbox and settles what is copied.
func source(ctx context.Context, h sandbox.Handle, src string, opts Options) (sandbox.FileInfo, kind, error) {
	info, err := stat(ctx, h, src)
	if err != nil {
		return info, 0, err
	}
	switch {
	case info.Mode&iofs.ModeSymlink != 0 && opts.FollowLink:
		return info, kindFollow, nil
	case info.Mode&iofs.ModeSymlink != 0:
		return info, kindSymlink, nil
	case info.IsDir:
		return info, kindDir, nil
	case !info.Mode.IsRegular():
		return info, 0, &TypeError{Path: src, Mode: info.Mode.Type()}
	}
	return info, kindFile, nil
}

// CopyOut copies src, a path inside sandbox id of b, to the host path
// hostDst (see the package documentation): a file, a symlink (as a link)
// or a directory (recursively). hostDst names the copy itself, or, when
// it is an existing directory, the directory it lands in under src's
// name. Nothing is written through a symlink, and a failed copy leaves
// hostDst as it was.
func CopyOut(ctx context.Context, h sandbox.Handle, src, hostDst string, opts Options) error {
	info, k, err := source(ctx, h, src, opts)
	if err != nil {
		return err
	}
	t, err := openHostTarget(hostDst, path.Base(src), k == kindDir)
	if err != nil {
		return err
	}
	defer t.close()
	tarOut := func(w io.Writer) error { return tarOut(ctx, h, src, w, opts.MaxSize) }
	switch k {
	case kindSymlink:
		return t.symlink(info.Link)
	case kindDir:
		return t.dir(info.Mode.Perm(), tarOut)
	}
	err = t.file(info.Mode.Perm(), func(w io.Writer) error { return readFile(ctx, h, src, w, opts.MaxSize) })
	if k == kindFollow && errors.Is(err, unix.EISDIR) {
		return t.dir(0o755, tarOut)
	}
	return err
}

// CopyOutTo writes src, a path inside sandbox id of b, to w: a file's
// contents, or a directory as a tar archive of the entries that are
// copied (directories, regular files and symlinks, with their permission
// bits). A symlink is a [*TypeError] unless opts.FollowLink.
func CopyOutTo(ctx context.Context, h sandbox.Handle, src string, w io.Writer, opts Options) error {
	info, k, err := source(ctx, h, src, opts)
	if err != nil {
		return err
	}
	switch k {
	case kindSymlink:
		return &TypeError{Path: src, Mode: iofs.ModeSymlink, Link: info.Link}
	case kindDir:
		return tarOut(ctx, h, src, w, opts.MaxSize)
	}
	err = readFile(ctx, h, src, w, opts.MaxSize)
	if k == kindFollow && errors.Is(err, unix.EISDIR) {
		return tarOut(ctx, h, src, w, opts.MaxSize)
	}
	return err
}

// CopyIn copies the host path hostSrc into sandbox id of b at dst: a
// regular file (with its permission bits), a symlink (as a link) or a
// directory (recursively, symlinks beneath it as links). dst names the
// copy itself, or, when it is an existing directory inside, the directory
// it lands in under hostSrc's name; a dst ending in / must be one.
func CopyIn(ctx context.Context, h sandbox.Handle, hostSrc, dst string) error {
	fi, err := os.Lstat(hostSrc)
	if err != nil {
		return err
	}
	target := dst
	if info, err := stat(ctx, h, dst); err == nil && info.IsDir {
		base := filepath.Base(filepath.Clean(hostSrc))
		if base == "/" || base == "." || base == ".." {
			return fmt.Errorf("%s is a directory inside: name the destination itself", dst)
		}
		target = path.Join(dst, base)
	} else if strings.HasSuffix(dst, "/") {
		return fmt.Errorf("the destination directory %s does not exist in the sandbox", dst)
	}
	switch {
	case fi.IsDir():
		// layer.WriteTar opens hostSrc without following it and reaches
		// everything beneath descriptor-relative, symlinks as links.
		return untar(ctx, h, target, func(w io.Writer) error { return layer.WriteTar(w, hostSrc) })
	case fi.Mode()&iofs.ModeSymlink != 0:
		link, err := os.Readlink(hostSrc)
		if err != nil {
			return err
		}
		// A link, created beside the target by the helper's untar.
		return untar(ctx, h, path.Dir(target), func(w io.Writer) error {
			tw := tar.NewWriter(w)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: path.Base(target), Linkname: link, Mode: 0o777}); err != nil {
				return err
			}
			return tw.Close()
		})
	case !fi.Mode().IsRegular():
		return &TypeError{Path: hostSrc, Mode: fi.Mode().Type()}
	}
	// Not through a symlink swapped in meanwhile, nor blocking on a FIFO.
	f, err := os.OpenFile(hostSrc, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", hostSrc)
	}
	return writeFile(ctx, h, target, f, fi.Mode().Perm())
}

// CopyInFrom writes what it reads from r to the file dst inside sandbox
// id of b, created (mode 0644) or replaced as one step (see
// [sandbox.Handle.WriteFile]).
func CopyInFrom(ctx context.Context, h sandbox.Handle, r io.Reader, dst string) error {
	return writeFile(ctx, h, dst, r, 0o644)
}
