package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// maxCopyEntries bounds the entries of a directory copied out of a
// sandbox (each costs the host an inode).
const maxCopyEntries = 1 << 20

// sparseSizeKey is the PAX record in which fs.WriteTarFrom gives a sparse
// file's real size (fs.ExtractTar restores the holes).
const sparseSizeKey = "TENT.sparse.realsize"

type cpOptions struct {
	follow  bool
	maxSize string
	limit   int64
}

func newCpCmd(g *globalOptions) *cobra.Command {
	o := &cpOptions{}
	c := &cobra.Command{
		Use:   "cp [-L] SRC DST",
		Short: "Copy files and directories into or out of a sandbox (ID:PATH on one side, - for stdin/stdout)",
		Long: `Copy between the host and a sandbox made by tent create, as docker cp
does: ID:PATH names a path inside the sandbox (resolved in the sandbox's
own view, with its restrictions), the other side is a host path or -.

  - A file is copied to DST, or into DST when DST is an existing
    directory; a DST ending in / must be an existing directory.
  - A directory is copied recursively to DST when DST does not exist, or
    into DST (as DST/NAME) when it is an existing directory. Only
    directories, regular files and symlinks are copied; symlinks are
    copied as links, never followed (-L follows SRC itself when it is
    one); permission bits are kept, set-id bits never.
  - Out of a sandbox, everything is written beneath the destination's
    directory, which tent holds open: first under a temporary name beside
    DST, renamed into place only once the whole copy succeeded. A failed
    copy leaves DST as it was; an existing directory is never merged into
    (tent cp refuses it). At most --max-size bytes of file data come out.
  - With DST -, a file's contents go to stdout, a directory as a tar
    archive; with SRC -, stdin is written to the file ID:PATH.

Exit status: 0 on success, 125 when the copy failed or was refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			srcID, srcPath, srcIn := splitRef(src)
			dstID, dstPath, dstIn := splitRef(dst)
			if srcIn == dstIn {
				return &usageError{cmd: c.CommandPath(), err: errors.New("exactly one side must be ID:PATH")}
			}
			var err error
			if o.limit, err = policy.ParseSize(o.maxSize); err != nil {
				return &exitError{code: exitRefused, msg: fmt.Sprintf("--max-size %q: %v", o.maxSize, err)}
			}
			ref := dstID
			if srcIn {
				ref = srcID
			}
			rec, err := g.lookup(ref)
			if err != nil {
				return err
			}
			if srcIn {
				err = o.copyOut(c, rec, srcPath, dst)
			} else {
				err = o.copyIn(rec, src, dstPath)
			}
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&o.follow, "follow-link", "L", false, "follow SRC when it is a symlink")
	c.Flags().StringVar(&o.maxSize, "max-size", "8G", "stop a copy out of a sandbox after `SIZE` bytes of file data")
	return c
}

// splitRef splits ID:PATH; a host path (or -) has no colon before its
// first slash.
func splitRef(s string) (id, path string, inside bool) {
	id, path, ok := strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/") {
		return "", s, false
	}
	return id, path, true
}

// remoteInfo is what the file helper's stat says of a path.
type remoteInfo struct {
	Mode  os.FileMode `json:"mode"`
	IsDir bool        `json:"is_dir"`
	Link  string      `json:"link"`
}

// remoteOut runs the file helper's op on p and copies its stdout to w; an
// error of w (a limit reached) ends the helper (its pipe is closed).
func remoteOut(rec *sandboxView, op, p string, w io.Writer) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, pr)
		pr.Close() // on an error, the helper meets EPIPE
		copied <- err
	}()
	err = rec.file(sandbox.FileOp(op), p, nil, devnull, pw)
	pw.Close()
	if cerr := <-copied; cerr != nil {
		return cerr
	}
	return err
}

// remoteStat stats p inside the sandbox (not following a final symlink).
func remoteStat(rec *sandboxView, p string) (*remoteInfo, error) {
	var buf bytes.Buffer
	if err := remoteOut(rec, "stat", p, &limitWriter{w: &buf, max: 1 << 20, what: "the stat of " + p}); err != nil {
		return nil, err
	}
	var info remoteInfo
	if err := json.Unmarshal(buf.Bytes(), &info); err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	return &info, nil
}

// limitWriter fails once more than max bytes were written.
type limitWriter struct {
	w    io.Writer
	n    int64 // written so far
	max  int64
	what string
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.max {
		return 0, fmt.Errorf("%s is larger than %d bytes (see --max-size)", l.what, l.max)
	}
	l.n += int64(len(p))
	return l.w.Write(p)
}

// typeName names a file type tent cp does not copy.
func typeName(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// copyOut copies ID:srcPath to the host path dst (or - for stdout).
func (o *cpOptions) copyOut(c *cobra.Command, rec *sandboxView, srcPath, dst string) error {
	info, err := remoteStat(rec, srcPath)
	if err != nil {
		return err
	}
	kind := "file"
	switch {
	case info.Mode&os.ModeSymlink != 0 && o.follow:
		kind = "follow" // a file, or a directory when read says EISDIR
	case info.Mode&os.ModeSymlink != 0:
		kind = "symlink"
	case info.IsDir:
		kind = "dir"
	case !info.Mode.IsRegular():
		return fmt.Errorf("%s is a %s: tent cp copies regular files, directories and symlinks", srcPath, typeName(info.Mode))
	}
	if dst == "-" {
		out := c.OutOrStdout()
		switch kind {
		case "symlink":
			return fmt.Errorf("%s is a symlink (to %q): nothing to write to stdout (-L follows it)", srcPath, info.Link)
		case "dir":
			return o.tarOut(rec, srcPath, out)
		}
		err := remoteOut(rec, "read", srcPath, &limitWriter{w: out, max: o.limit, what: srcPath})
		if kind == "follow" && errors.Is(err, unix.EISDIR) {
			return o.tarOut(rec, srcPath, out)
		}
		return err
	}
	t, err := openHostTarget(dst, path.Base(srcPath), kind == "dir")
	if err != nil {
		return err
	}
	defer t.close()
	switch kind {
	case "symlink":
		return t.symlink(info.Link)
	case "dir":
		return t.dir(info.Mode.Perm(), func(w io.Writer) error { return o.tarOut(rec, srcPath, w) })
	}
	err = t.file(info.Mode.Perm(), func(w io.Writer) error {
		return remoteOut(rec, "read", srcPath, &limitWriter{w: w, max: o.limit, what: srcPath})
	})
	if kind == "follow" && errors.Is(err, unix.EISDIR) {
		return t.dir(0o755, func(w io.Writer) error { return o.tarOut(rec, srcPath, w) })
	}
	return err
}

// tarOut streams the directory srcPath out of the sandbox (the file
// helper's tar op) and writes the entries tent cp copies to w as a tar
// archive (see sanitizeTar).
func (o *cpOptions) tarOut(rec *sandboxView, srcPath string, w io.Writer) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sanitizeTar(pr, w, o.limit)
		pr.CloseWithError(err) // on an error, stop the helper
		done <- err
	}()
	err := remoteOut(rec, "tar", srcPath, pw)
	pw.CloseWithError(err)
	if serr := <-done; serr != nil && (err == nil || errors.Is(err, io.ErrClosedPipe)) {
		return serr
	}
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w (this tent's file helper cannot archive directories)", err)
	}
	return err
}

// sanitizeTar copies the archive a sandbox sent (hostile input) from r to
// w keeping only what tent cp copies: directories, regular files and
// symlinks, with their permission bits (no set-id bits, no owner, no
// extended attributes; only the PAX record of a sparse file's size). It
// fails once the files' data pass limit bytes or the entries
// maxCopyEntries.
func sanitizeTar(r io.Reader, w io.Writer, limit int64) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("reading the sandbox's archive: %w", err)
		}
		if n >= maxCopyEntries {
			return fmt.Errorf("more than %d entries: copy a smaller directory", maxCopyEntries)
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
				return fmt.Errorf("%s: the copy is larger than %d bytes (see --max-size)", hdr.Name, limit)
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

// hostTarget is where a copy out lands: name in the directory dirfd,
// which tent holds open; it is written under a temporary name and
// renamed into place.
type hostTarget struct {
	d     *os.File
	name  string // final name in dir
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
	if srcIsDir {
		var st unix.Stat_t
		if err := unix.Fstatat(t.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			d.Close()
			return nil, fmt.Errorf("%s exists: tent cp does not merge directories (remove it, or copy into another directory)", t.shown)
		}
	}
	return t, nil
}

func (t *hostTarget) fd() int { return int(t.d.Fd()) }

func (t *hostTarget) close() { t.d.Close() }

// tempName is a fresh name beside the target.
func (t *hostTarget) tempName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ".tent-cp-" + hex.EncodeToString(b[:]) + ".tmp"
}

// file writes a regular file: created O_EXCL|O_NOFOLLOW under a temporary
// name, filled by fill, synced, given perm and renamed over the target
// (a symlink there is replaced, never followed).
func (t *hostTarget) file(perm os.FileMode, fill func(io.Writer) error) error {
	tmp := t.tempName()
	fd, err := unix.Openat(t.fd(), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(t.d.Name(), tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = fill(f)
	if err == nil {
		err = f.Chmod(perm & 0o777)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = t.rename(tmp, 0)
	}
	if err != nil {
		_ = unix.Unlinkat(t.fd(), tmp, 0)
	}
	return err
}

// symlink creates a symlink to target (a link, never followed).
func (t *hostTarget) symlink(target string) error {
	tmp := t.tempName()
	if err := unix.Symlinkat(target, t.fd(), tmp); err != nil {
		return &os.PathError{Op: "symlink", Path: t.shown, Err: err}
	}
	if err := t.rename(tmp, 0); err != nil {
		_ = unix.Unlinkat(t.fd(), tmp, 0)
		return err
	}
	return nil
}

// dir extracts the archive that fill writes into a temporary directory
// (fs.ExtractTar: every entry created beneath it, no symlink followed)
// and renames it to the target, which must not exist meanwhile.
func (t *hostTarget) dir(perm os.FileMode, fill func(io.Writer) error) error {
	tmp := t.tempName()
	if err := unix.Mkdirat(t.fd(), tmp, 0o700); err != nil {
		return &os.PathError{Op: "mkdir", Path: filepath.Join(t.d.Name(), tmp), Err: err}
	}
	// The directory fd tent holds, by its /proc name.
	tmpPath := fmt.Sprintf("/proc/self/fd/%d/%s", t.fd(), tmp)
	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := fs.ExtractTar(pr, tmpPath)
		if err == nil {
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err)
		extracted <- err
	}()
	err := fill(pw)
	pw.CloseWithError(err)
	if xerr := <-extracted; err == nil || errors.Is(err, io.ErrClosedPipe) {
		if xerr != nil {
			err = xerr
		}
	}
	if err == nil {
		err = os.NewSyscallError("fchmodat", unix.Fchmodat(t.fd(), tmp, uint32(perm&0o777), 0))
	}
	if err == nil {
		err = t.rename(tmp, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		_ = os.RemoveAll(tmpPath)
	}
	return err
}

func (t *hostTarget) rename(tmp string, flags uint) error {
	if err := unix.Renameat2(t.fd(), tmp, t.fd(), t.name, flags); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s appeared meanwhile: tent cp does not merge directories", t.shown)
		}
		return &os.PathError{Op: "rename", Path: t.shown, Err: err}
	}
	return nil
}

// copyIn copies the host path src (or - for stdin) to ID:dstPath.
func (o *cpOptions) copyIn(rec *sandboxView, src, dstPath string) error {
	if src == "-" {
		return remoteWrite(rec, dstPath, os.Stdin, 0o644)
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	target := dstPath
	if info, err := remoteStat(rec, dstPath); err == nil && info.IsDir {
		base := filepath.Base(filepath.Clean(src))
		if base == "/" || base == "." || base == ".." {
			return fmt.Errorf("%s is a directory inside: name the destination itself", dstPath)
		}
		target = path.Join(dstPath, base)
	} else if strings.HasSuffix(dstPath, "/") {
		return fmt.Errorf("the destination directory %s does not exist in the sandbox", dstPath)
	}
	switch {
	case fi.IsDir():
		// fs.WriteTar opens src without following it and reaches
		// everything beneath descriptor-relative, symlinks as links.
		return remoteUntar(rec, target, func(w io.Writer) error { return fs.WriteTar(w, src) })
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		// A link, created beside the target by the helper's untar.
		return remoteUntar(rec, path.Dir(target), func(w io.Writer) error {
			tw := tar.NewWriter(w)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: path.Base(target), Linkname: link, Mode: 0o777}); err != nil {
				return err
			}
			return tw.Close()
		})
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is a %s: tent cp copies regular files, directories and symlinks", src, typeName(fi.Mode()))
	}
	// Not through a symlink swapped in meanwhile, nor blocking on a FIFO.
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	return remoteWrite(rec, target, f, fi.Mode().Perm())
}

func remoteWrite(rec *sandboxView, p string, in *os.File, mode os.FileMode) error {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	return rec.file(sandbox.FileWrite, p, []string{fmt.Sprintf("%o", mode)}, in, devnull)
}

// remoteUntar creates the directory p inside (if needed) and extracts
// into it the archive that fill writes.
func remoteUntar(rec *sandboxView, p string, fill func(io.Writer) error) error {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	filled := make(chan error, 1)
	go func() {
		err := fill(pw)
		pw.Close()
		filled <- err
	}()
	err = rec.file(sandbox.FileUntar, p, nil, pr, devnull)
	pr.Close()
	if ferr := <-filled; ferr != nil && err == nil {
		err = ferr
	}
	return err
}
