package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/fs/layer"
)

// openSandboxRoot opens the root directory of the sandbox whose init is
// pid (/proc/PID/root, followed once: the one magic link tent means to
// follow) as an O_PATH descriptor.
func openSandboxRoot(pid int) (*os.File, error) {
	p := "/proc/" + strconv.Itoa(pid) + "/root"
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openInSandbox opens target (an absolute path inside the sandbox) as a
// directory beneath the sandbox's root with openat2 RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS: a symlink anywhere on the
// way — an absolute one would resolve against the host's root, since it
// is the host that resolves it — fails with ELOOP instead of leading the
// host out of the sandbox's tree.
func openInSandbox(root *os.File, target string) (*os.File, error) {
	rel := strings.TrimLeft(target, "/")
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(int(root.Fd()), rel, how)
		if err == unix.EAGAIN && i < 64 {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "openat2", Path: target, Err: err}
		}
		return os.NewFile(uintptr(fd), target), nil
	}
}

// archiveInSandbox archives the sandbox's directory target (see
// openInSandbox; the walk beneath it is descriptor-relative too, see
// layer.WriteTarFrom): the archive holds only what the sandbox itself sees
// at that path.
func archiveInSandbox(dir, name string, root *os.File, target string) (snapshotPart, error) {
	d, err := openInSandbox(root, target)
	if err != nil {
		return snapshotPart{}, err
	}
	defer d.Close()
	return archive(dir, name, d)
}

// archiveRootInSandbox archives what the sandbox wrote in its root tmpfs
// (Spec.WritableRoot): the root's own filesystem, less the plan's mount
// points and symlinks (each fork has its own) and whatever is mounted;
// the walk is descriptor-relative beneath the sandbox's root, as for
// archiveInSandbox.
func archiveRootInSandbox(dir, name string, root *os.File, plan *fs.Plan) (snapshotPart, error) {
	d, err := openInSandbox(root, "/")
	if err != nil {
		return snapshotPart{}, err
	}
	defer d.Close()
	own := map[string]bool{}
	for _, st := range plan.Steps {
		own[strings.TrimPrefix(st.Target, "/")] = true
	}
	return archiveWith(dir, name, func(w io.Writer) error {
		return layer.WriteTarFromExcept(w, d, func(rel string) bool { return own[rel] })
	})
}

// archiveHostDir archives a host directory tent made (a cow upper layer,
// whose contents are the sandbox's: the walk beneath it never follows a
// symlink).
func archiveHostDir(dir, name, src string) (snapshotPart, error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return snapshotPart{}, &os.PathError{Op: "open", Path: src, Err: err}
	}
	d := os.NewFile(uintptr(fd), src)
	defer d.Close()
	return archive(dir, name, d)
}

// archive writes the open directory src as dir/name (tar, zstd) and
// returns its checksum. The file is not fsync'd: Snapshot syncs all
// parts together.
func archive(dir, name string, src *os.File) (snapshotPart, error) {
	return archiveWith(dir, name, func(w io.Writer) error { return layer.WriteTarFrom(w, src) })
}

// archiveWith writes the tar stream write produces as dir/name (zstd),
// as archive does.
func archiveWith(dir, name string, write func(io.Writer) error) (snapshotPart, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return snapshotPart{}, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	zw, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return snapshotPart{}, err
	}
	if err := write(zw); err != nil {
		zw.Close()
		return snapshotPart{}, err
	}
	if err := zw.Close(); err != nil {
		return snapshotPart{}, err
	}
	return snapshotPart{File: name, SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
