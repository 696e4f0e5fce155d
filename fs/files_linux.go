package fs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
)

// FileHelperArg0 is the argv[0] of tent's file helper: the host binary
// run inside a sandbox, with the sandbox's every restriction (mounts,
// Landlock, seccomp, identity), to read, write, list, stat or remove one
// path for an agent's file tools. Whatever the sandbox could not do, the
// helper cannot either.
const FileHelperArg0 = "tent-fs"

// Exit codes of the helper: 0 success, helperErrno+errno-name on stderr
// for a failed system call, 2 for bad usage.
const (
	helperUsage = 2
	// HelperFailed is the helper's exit code when an operation failed; its
	// stderr then holds "ERRNO_NAME message".
	HelperFailed = 3
)

// RunFileHelper is the helper's main: args are [op, path, ...] with op
// one of read (file to stdout), write (stdin to file; optional octal
// mode), put (write, creating the parents, then replace the file's
// metadata with the "meta NAME VALUE" triples that follow the optional
// mode, then the file's FileInfo as JSON), list (JSON array of FileInfo; an optional depth, default 1,
// lists subdirectories to that depth), stat (JSON FileInfo), mkdir (a
// directory and its parents; EEXIST when it is there already, ENOTDIR
// when a non-directory is; its FileInfo as JSON), rename (to the path in
// the next argument, creating its parents; the FileInfo of the
// destination as JSON), watch (see [WatchEvent]), untar (stdin, a
// WriteTar archive, into the directory), remove (file or empty
// directory), remove-all. It returns the exit code.
//
// read and write act on regular files only: the path (symlinks followed,
// as the sandbox would) is opened O_NONBLOCK and checked by fstat, and
// anything else — a device such as /dev/zero, a FIFO, a socket — fails
// with EINVAL without a byte read or written, so the host is never fed
// an endless stream nor left waiting on a pipe. read sends at most the
// size fstat gave (a file grown meanwhile is cut there); a file that
// reports size 0, as procfs and sysfs files do, is read up to
// MaxPseudoFileRead bytes, and fails with EFBIG beyond. write and put
// replace an existing file as one step (see writeRegular): a full disk
// or a killed helper leaves it as it was. write-framed and put-framed are
// write and put whose stdin is framed (see [FrameEncoder]): an input that
// ends before its end mark fails them with EPIPE (a bad frame, or an end
// mark counting other than what came, with EPROTO), and the file is left
// as it was (but where it must be written in place: see writeInPlace).
func RunFileHelper(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "EINVAL usage: tent-fs read|write|put|list|stat|mkdir|rename|watch|tar|untar|remove|remove-all PATH [ARG...]")
		return helperUsage
	}
	op, path := args[0], args[1]
	err := fileOp(op, path, args[2:], stdin, stdout)
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		errno = unix.EIO
	}
	fmt.Fprintf(stderr, "%s %v\n", unix.ErrnoName(errno), err)
	return HelperFailed
}

func fileOp(op, path string, rest []string, stdin io.Reader, stdout io.Writer) error {
	switch op {
	case "read":
		if len(rest) > 0 && rest[0] == "sized" {
			return readSized(path, stdout)
		}
		return readRegular(path, stdout)
	case "write", FileOpWriteFramed:
		mode, err := modeArg("write", path, rest)
		if err != nil {
			return err
		}
		if op == FileOpWriteFramed {
			stdin = newFrameDecoder(stdin)
		}
		return writeRegular(path, mode, stdin, true)
	case "list":
		depth := 1
		if len(rest) > 0 {
			d, err := strconv.Atoi(rest[0])
			if err != nil || d < 1 {
				return &os.PathError{Op: "list", Path: path, Err: fmt.Errorf("depth %q: want a positive number: %w", rest[0], unix.EINVAL)}
			}
			depth = d
		}
		return listTree(path, depth, stdout)
	case "put", FileOpPutFramed:
		rest, meta, err := metadataArgs(path, rest)
		if err != nil {
			return err
		}
		mode, err := modeArg("put", path, rest)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if op == FileOpPutFramed {
			stdin = newFrameDecoder(stdin)
		}
		if err := writeRegular(path, mode, stdin, false); err != nil {
			return err
		}
		if err := setMetadata(path, meta); err != nil {
			return err
		}
		return encodeInfo(path, stdout)
	case "mkdir":
		switch fi, err := os.Stat(path); {
		case err == nil && fi.IsDir():
			return &os.PathError{Op: "mkdir", Path: path, Err: unix.EEXIST}
		case err == nil:
			return &os.PathError{Op: "mkdir", Path: path, Err: fmt.Errorf("exists and is not a directory: %w", unix.ENOTDIR)}
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return encodeInfo(path, stdout)
	case "rename":
		if len(rest) < 1 || rest[0] == "" {
			return &os.PathError{Op: "rename", Path: path, Err: fmt.Errorf("no destination: %w", unix.EINVAL)}
		}
		if _, err := os.Lstat(path); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(rest[0]), 0o755); err != nil {
			return err
		}
		if err := os.Rename(path, rest[0]); err != nil {
			return err
		}
		return encodeInfo(rest[0], stdout)
	case "watch":
		return watchDir(path, rest, stdin, stdout)
	case "stat":
		fi, err := lstatInfo(path)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(fi)
	case "tar":
		return TarDir(path, stdout)
	case "untar":
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
		return ExtractTar(stdin, path)
	case "remove":
		return os.Remove(path)
	case "remove-all":
		if _, err := os.Lstat(path); err != nil {
			return err
		}
		return os.RemoveAll(path)
	}
	return &os.PathError{Op: op, Path: path, Err: unix.EINVAL}
}

// modeArg parses the optional octal mode in rest[0] (default 0644).
func modeArg(op, path string, rest []string) (os.FileMode, error) {
	if len(rest) == 0 {
		return 0o644, nil
	}
	var m uint32
	if _, err := fmt.Sscanf(rest[0], "%o", &m); err != nil || m > 0o7777 {
		return 0, &os.PathError{Op: op, Path: path, Err: unix.EINVAL}
	}
	return os.FileMode(m), nil
}

func lstatInfo(path string) (FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return FileInfo{}, err
	}
	info := FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC(), IsDir: fi.IsDir()}
	if fi.Mode()&os.ModeSymlink != 0 {
		info.Link, _ = os.Readlink(path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		info.Path = abs
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = int(st.Uid), int(st.Gid)
		info.Owner, info.Group = idNames().user[info.UID], idNames().group[info.GID]
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		info.Metadata = readMetadata(path)
	}
	return info, nil
}

// metadataArgs splits put's arguments into the optional mode and the
// metadata given as "meta NAME VALUE" triples.
func metadataArgs(path string, rest []string) ([]string, map[string]string, error) {
	i := 0
	if len(rest) > 0 && rest[0] != "meta" {
		i = 1
	}
	meta := map[string]string{}
	for ; i < len(rest); i += 3 {
		if rest[i] != "meta" || i+2 >= len(rest) {
			return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("want meta NAME VALUE, not %q: %w", rest[i:], unix.EINVAL)}
		}
		name, value := rest[i+1], rest[i+2]
		if name == "" || len(name) > MaxMetadataName || len(value) > MaxMetadataValue || strings.ContainsRune(name, 0) {
			return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("metadata %q: a name of 1 to %d bytes and a value of at most %d: %w", name, MaxMetadataName, MaxMetadataValue, unix.EINVAL)}
		}
		meta[name] = value
	}
	if len(meta) > MaxMetadataEntries {
		return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("%d metadata entries, at most %d: %w", len(meta), MaxMetadataEntries, unix.EINVAL)}
	}
	if i == 1 {
		return rest[:1], meta, nil
	}
	return nil, meta, nil
}

// setMetadata replaces path's metadata (its MetadataXattrPrefix
// attributes) with meta.
func setMetadata(path string, meta map[string]string) error {
	for name := range metadataNames(path) {
		if err := unix.Lremovexattr(path, MetadataXattrPrefix+name); err != nil && err != unix.ENODATA {
			return &os.PathError{Op: "removexattr", Path: path, Err: err}
		}
	}
	for name, value := range meta {
		if err := unix.Lsetxattr(path, MetadataXattrPrefix+name, []byte(value), 0); err != nil {
			return &os.PathError{Op: "setxattr", Path: path, Err: err}
		}
	}
	return nil
}

// metadataNames lists path's metadata names (without the prefix), at
// most MaxMetadataEntries; none when the file system has no extended
// attributes.
func metadataNames(path string) map[string]struct{} {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(path, buf)
	if err != nil || n <= 0 {
		return nil
	}
	names := map[string]struct{}{}
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		if name, ok := strings.CutPrefix(a, MetadataXattrPrefix); ok && name != "" && len(names) < MaxMetadataEntries {
			names[name] = struct{}{}
		}
	}
	return names
}

// readMetadata reads path's metadata; nil when it has none.
func readMetadata(path string) map[string]string {
	names := metadataNames(path)
	if len(names) == 0 {
		return nil
	}
	meta := make(map[string]string, len(names))
	buf := make([]byte, MaxMetadataValue)
	for name := range names {
		if n, err := unix.Lgetxattr(path, MetadataXattrPrefix+name, buf); err == nil {
			meta[name] = string(buf[:n])
		}
	}
	return meta
}

// encodeInfo writes the FileInfo of path to w as JSON.
func encodeInfo(path string, w io.Writer) error {
	fi, err := lstatInfo(path)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(fi)
}

// listTree writes, as one JSON array, the FileInfo of every entry beneath
// the directory at path down to depth levels (1: its entries only), each
// directory's entries in name order and followed by its own (pre-order);
// symlinks are listed, never followed below path. Entries that vanish
// meanwhile are left out. It streams: nothing is held but the current
// directories.
func listTree(path string, depth int, w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	first := true
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := os.ReadDir(dir)
		if err != nil && level == 1 {
			return err // path itself
		} else if err != nil {
			return nil // a subdirectory unreadable or gone: skipped
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := lstatInfo(p)
			if err != nil {
				continue
			}
			sep := ","
			if first {
				sep, first = "[", false
			}
			if _, err := bw.WriteString(sep); err != nil {
				return err
			}
			if err := enc.Encode(fi); err != nil {
				return err
			}
			if fi.IsDir && level < depth {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(path, 1); err != nil {
		return err
	}
	end := "]\n"
	if first {
		end = "[]\n"
	}
	if _, err := bw.WriteString(end); err != nil {
		return err
	}
	return bw.Flush()
}

// names maps the sandbox's uids and gids to their names.
type names struct{ user, group map[int]string }

var (
	namesOnce sync.Once
	namesVal  names
)

// idNames reads /etc/passwd and /etc/group, as the sandbox sees them,
// once per helper run (at most 1 MiB of each).
func idNames() names {
	namesOnce.Do(func() {
		namesVal = names{user: readIDFile("/etc/passwd"), group: readIDFile("/etc/group")}
	})
	return namesVal
}

// readIDFile maps the id (third field) of each "name:x:id:..." line of
// file to its name; the first line of an id wins.
func readIDFile(file string) map[int]string {
	m := map[int]string{}
	f, err := os.Open(file)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.Atoi(fields[2])
		if _, dup := m[id]; err != nil || dup {
			continue
		}
		m[id] = fields[0]
	}
	return m
}

// MaxPseudoFileRead bounds what the file helper's read sends of a
// regular file whose size reads as 0 (procfs, sysfs).
const MaxPseudoFileRead = 4 << 20

// openRegularPath opens path with flags|O_NONBLOCK (a FIFO neither
// blocks nor waits for a peer) and returns it only if fstat of the
// descriptor says it is a regular file.
func openRegularPath(path string, flags int, perm os.FileMode) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, flags|unix.O_NONBLOCK|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%v is not a regular file: %w", fi.Mode().Type(), unix.EINVAL)}
	}
	return f, fi, nil
}

func readRegular(path string, stdout io.Writer) error {
	f, fi, err := openRegularPath(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if size := fi.Size(); size > 0 {
		_, err = io.CopyN(stdout, f, size)
		if errors.Is(err, io.EOF) { // shrank meanwhile: what there was
			err = nil
		}
		return err
	}
	n, err := io.Copy(stdout, io.LimitReader(f, MaxPseudoFileRead+1))
	if err == nil && n > MaxPseudoFileRead {
		err = &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("a size-0 file longer than %d bytes: %w", MaxPseudoFileRead, unix.EFBIG)}
	}
	return err
}

// readSized is read with the length first: a decimal byte count and a
// newline, then exactly that many bytes. A file that shrinks while it
// is read fails with EAGAIN (its length was sent already); a size-0
// file is read into memory first (at most MaxPseudoFileRead bytes).
func readSized(path string, stdout io.Writer) error {
	f, fi, err := openRegularPath(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size := fi.Size()
	if size == 0 {
		var buf bytes.Buffer
		if n, err := io.Copy(&buf, io.LimitReader(f, MaxPseudoFileRead+1)); err != nil {
			return err
		} else if n > MaxPseudoFileRead {
			return &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("a size-0 file longer than %d bytes: %w", MaxPseudoFileRead, unix.EFBIG)}
		}
		if _, err := fmt.Fprintf(stdout, "%d\n", buf.Len()); err != nil {
			return err
		}
		_, err := buf.WriteTo(stdout)
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%d\n", size); err != nil {
		return err
	}
	if _, err := io.CopyN(stdout, f, size); errors.Is(err, io.EOF) {
		return &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("the file shrank while it was read: %w", unix.EAGAIN)}
	} else if err != nil {
		return err
	}
	return nil
}

// WriteTemps names the temporaries the file helper's write and put make
// beside the file they replace (see internal/atomicfile); each write
// removes the ones a killed helper left in its file's directory.
var WriteTemps = atomicfile.Options{Prefix: ".tent-write-", Suffix: ".tmp"}

// maxSymlinks bounds the symlinks writeRegular follows, as the kernel's
// 40.
const maxSymlinks = 40

// writeRegular writes stdin to the regular file at path (symlinks
// followed, as the sandbox would), atomically: the data go to a
// temporary beside the file (atomicfile), which is renamed over it only
// once all of stdin is written and synced, so that a full disk or a
// killed helper leaves the old file, whole, or the new one. A new file
// gets mode (less the umask); an existing one keeps its permission bits,
// its owner and, with keepMeta, its metadata (MetadataXattrPrefix
// attributes); other extended attributes, and hard links to the old
// file, are not carried over.
//
// The file must be writable by the sandbox, as before: an existing one
// is opened for writing first. Where no temporary can replace it (its
// directory is not writable, its owner cannot be kept, it is a mount
// point), it is written in place through that descriptor, as tent did
// before.
func writeRegular(path string, mode os.FileMode, stdin io.Reader, keepMeta bool) error {
	target, err := finalPath(path)
	if err != nil {
		return err
	}
	// O_PATH: a directory the sandbox may write but not list will do.
	d, err := os.OpenFile(filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: errnoIn(err)}
	}
	defer d.Close()
	dirfd, name := int(d.Fd()), filepath.Base(target)
	o := WriteTemps
	perm := mode &^ umask()
	var meta map[string]string
	old, err := openExisting(dirfd, name, path)
	if err != nil {
		return err
	}
	if old != nil {
		defer old.Close()
		fi, err := old.Stat()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		perm = fi.Mode() & (os.ModePerm | os.ModeSticky)
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			o.Chown, o.UID, o.GID = true, int(st.Uid), int(st.Gid)
		}
		if keepMeta {
			meta = readMetadata(target)
		}
		if mountPoint(dirfd, int(old.Fd())) {
			return writeInPlace(old, stdin)
		}
	}
	_, _ = o.Clean(dirfd)
	f, err := atomicfile.CreateAt(dirfd, name, perm, o)
	if err != nil {
		// No temporary can replace it here (never for want of space:
		// in place, a full disk would cut the file short).
		if old != nil && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) ||
			errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOVERFLOW)) {
			return writeInPlace(old, stdin)
		}
		return &os.PathError{Op: "create", Path: path, Err: errnoIn(err)}
	}
	if _, err := io.Copy(f, stdin); err != nil {
		f.Abort()
		return err
	}
	for k, v := range meta {
		_ = unix.Fsetxattr(int(f.Fd()), MetadataXattrPrefix+k, []byte(v), 0)
	}
	if err := f.Commit(); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: errnoIn(err)}
	}
	return nil
}

// errnoIn is the errno inside err, for an error naming the caller's path
// rather than the temporary's.
func errnoIn(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// finalPath follows path's final symlinks (at most maxSymlinks), as
// open(2) would: a dangling one names the file to create.
func finalPath(path string) (string, error) {
	p := path
	for range maxSymlinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p, nil
		}
		link, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(p), link)
		}
		p = link
	}
	return "", &os.PathError{Op: "open", Path: path, Err: unix.ELOOP}
}

// openExisting opens the file name of dirfd for writing, without
// truncating it (the sandbox's right to write it is checked as before);
// nil when there is none. A directory is EISDIR, anything but a regular
// file EINVAL.
func openExisting(dirfd int, name, path string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case err != nil: // ELOOP: a symlink swapped in meanwhile
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%v is not a regular file: %w", fi.Mode().Type(), unix.EINVAL)}
	}
	return f, nil
}

// mountPoint reports whether the file fd is mounted on its own (a file
// bind-mounted over another), apart from the directory dirfd: a rename
// cannot replace it.
func mountPoint(dirfd, fd int) bool {
	var dst, fst unix.Statx_t
	if unix.Statx(dirfd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &dst) != nil ||
		unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &fst) != nil {
		return false
	}
	if fst.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && fst.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return true
	}
	return dst.Mask&fst.Mask&unix.STATX_MNT_ID != 0 && dst.Mnt_id != fst.Mnt_id
}

// writeInPlace truncates the open file f and writes stdin into it (not
// atomic: where no temporary can replace the file). A framed input cut
// short fails it (EPIPE), the file holding what came: never reported as
// written.
func writeInPlace(f *os.File, stdin io.Reader) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := io.Copy(f, stdin); err != nil {
		return err
	}
	return f.Close()
}

// umask is the process's file mode creation mask (from
// /proc/self/status; 022 when it cannot be read).
func umask() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & os.ModePerm
				}
			}
		}
	}
	return 0o022
}
