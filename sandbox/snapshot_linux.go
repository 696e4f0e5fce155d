package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
)

const manifestName = "manifest.json"

// Snapshot freezes the sandbox briefly (when it has a cgroup), archives
// its writable layers into a new directory under dir, and thaws it. The
// snapshot appears atomically (written aside, fsync'd, renamed) and its
// cost grows with what changed: only the cow mounts' upper layers and
// the sandbox's own tmpfs are read.
func (s *Sandbox) Snapshot(ctx context.Context, dir string, opts SnapshotOptions) (*Snapshot, error) {
	id := opts.ID
	if id == "" {
		id = randomID()
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil, ErrTerminated
	}
	frozenByUs := false
	if s.run.cg != nil && !s.suspended {
		if err := s.run.cg.Freeze(ctx); err == nil {
			frozenByUs = true
		}
	}
	defer func() {
		if frozenByUs {
			_ = s.run.cg.Thaw(context.Background())
		}
		s.mu.Unlock()
	}()

	snap := &Snapshot{ID: id, SandboxID: opts.SandboxID, Created: time.Now().UTC(), Spec: s.spec}
	// A snapshot is written aside, in a dot directory that listings skip,
	// named after the sandbox: if its owner is killed meanwhile, the next
	// snapshot of the sandbox (or Store.Reclaim) removes it.
	removeSnapshotTemps(dir, opts.SandboxID)
	tmp := filepath.Join(dir, snapshotTempPrefix(opts.SandboxID)+id)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	for i, l := range s.run.plan.layers {
		part, err := archiveHostDir(tmp, "cow-"+strconv.Itoa(i)+".tar.zst", l.Upper)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", l.Target, err)
		}
		part.Kind, part.Target = "cow", l.Target
		snap.Parts = append(snap.Parts, part)
	}
	// The sandbox's own tmpfs and rw mounts, through its init's root (the
	// caller owns the sandbox's user namespace, so /proc/PID/root is open
	// to it), opened once and walked beneath, never by path: see
	// openInSandbox.
	type source struct{ kind, name, target string }
	var sources []source
	for _, st := range s.run.plan.cfg.Plan.Steps {
		switch {
		case st.Kind == fs.KindTmpfs && st.Target == "/tmp":
			sources = append(sources, source{"tmp", "tmp.tar.zst", st.Target})
		case st.Kind == fs.KindTmpfs && st.Target == s.run.plan.cfg.Plan.Home:
			sources = append(sources, source{"home", "home.tar.zst", st.Target})
		}
	}
	if opts.IncludeReadWrite {
		i := 0
		for _, st := range s.run.plan.cfg.Plan.Steps {
			if st.Kind != fs.KindBind || !st.User || st.ReadOnly {
				continue
			}
			// As the sandbox sees it (a root caller's rw mounts are
			// idmapped there).
			sources = append(sources, source{"rw", "rw-" + strconv.Itoa(i) + ".tar.zst", st.Target})
			i++
		}
	}
	if len(sources) > 0 {
		root, err := openSandboxRoot(s.run.init.Pid())
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		defer root.Close()
		for _, src := range sources {
			part, err := archiveInSandbox(tmp, src.name, root, src.target)
			if err != nil {
				return nil, fmt.Errorf("snapshot of %s: %w", src.target, err)
			}
			part.Kind, part.Target = src.kind, src.target
			snap.Parts = append(snap.Parts, part)
		}
	}
	if err := writeJSONFile(filepath.Join(tmp, manifestName), snap); err != nil {
		return nil, err
	}
	if err := syncAll(tmp); err != nil {
		return nil, fmt.Errorf("snapshot: making it durable: %w", err)
	}
	final := filepath.Join(dir, id)
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	syncDir(dir)
	ok = true
	snap.Dir = final
	return snap, nil
}

// snapshotTempPrefix begins the name of the directory a snapshot of
// sandboxID is written in before it is renamed into place.
func snapshotTempPrefix(sandboxID string) string {
	if sandboxID == "" {
		return ".tmp-"
	}
	return ".tmp-" + sandboxID + "-"
}

// removeSnapshotTemps removes from dir the unfinished snapshots of
// sandboxID (none for an empty id), left by an owner killed while
// writing them. The caller makes sure no snapshot of it is under way.
func removeSnapshotTemps(dir, sandboxID string) {
	if sandboxID == "" || strings.Contains(sandboxID, "/") {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), snapshotTempPrefix(sandboxID)) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

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
// fs.WriteTarFrom): the archive holds only what the sandbox itself sees
// at that path.
func archiveInSandbox(dir, name string, root *os.File, target string) (SnapshotPart, error) {
	d, err := openInSandbox(root, target)
	if err != nil {
		return SnapshotPart{}, err
	}
	defer d.Close()
	return archive(dir, name, d)
}

// archiveHostDir archives a host directory tent made (a cow upper layer,
// whose contents are the sandbox's: the walk beneath it never follows a
// symlink).
func archiveHostDir(dir, name, src string) (SnapshotPart, error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return SnapshotPart{}, &os.PathError{Op: "open", Path: src, Err: err}
	}
	d := os.NewFile(uintptr(fd), src)
	defer d.Close()
	return archive(dir, name, d)
}

// archive writes the open directory src as dir/name (tar, zstd) and
// returns its checksum. The file is not fsync'd: Snapshot syncs all
// parts together.
func archive(dir, name string, src *os.File) (SnapshotPart, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return SnapshotPart{}, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	zw, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return SnapshotPart{}, err
	}
	if err := fs.WriteTarFrom(zw, src); err != nil {
		zw.Close()
		return SnapshotPart{}, err
	}
	if err := zw.Close(); err != nil {
		return SnapshotPart{}, err
	}
	return SnapshotPart{File: name, SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
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

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncAll makes dir's files and dir itself durable. The files are
// fsync'd concurrently, so that the filesystem commits them together
// (one journal commit rather than one per file: the snapshot's parts and
// manifest cost one disk flush, not five).
func syncAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	errs := make(chan error, len(entries))
	for _, e := range entries {
		go func() {
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err == nil {
				err = f.Sync()
				f.Close()
			}
			errs <- err
		}()
	}
	var first error
	for range entries {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// LoadSnapshot reads the snapshot in dir and verifies every part against
// its checksum (ErrSnapshotCorrupt when one differs).
func LoadSnapshot(dir string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	var snap Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrSnapshotCorrupt, err)
	}
	for _, p := range snap.Parts {
		if filepath.Base(p.File) != p.File {
			return nil, fmt.Errorf("%w: part %q", ErrSnapshotCorrupt, p.File)
		}
		sum, n, err := fileSHA256(filepath.Join(dir, p.File))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
		if sum != p.SHA256 || n != p.Size {
			return nil, fmt.Errorf("%w: %s does not match its checksum", ErrSnapshotCorrupt, p.File)
		}
	}
	snap.Dir = dir
	return &snap, nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// openPart returns a decompressing reader of one part.
func openPart(snap *Snapshot, p SnapshotPart) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(snap.Dir, p.File))
	if err != nil {
		return nil, err
	}
	zr, err := zstd.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return readCloser{zr.IOReadCloser(), f}, nil
}

type readCloser struct {
	io.ReadCloser
	f *os.File
}

func (r readCloser) Close() error { r.ReadCloser.Close(); return r.f.Close() }

// Fork provisions a new, independent sandbox from snap: its spec, its cow
// mounts' changes (over the same host directories), its /tmp and $HOME.
// An rw mount's archive (IncludeReadWrite) is restored only into an empty
// host directory — one that was lost, or a fresh one on another host —
// and never over a directory that has contents: those are the host's
// live files, which another sandbox may share.
func Fork(ctx context.Context, snap *Snapshot, opts ProvisionOptions) (*Sandbox, error) {
	byTarget := map[string]SnapshotPart{}
	for _, p := range snap.Parts {
		byTarget[p.Kind+":"+p.Target] = p
	}
	prefill := func(layers []CowLayer) error {
		for _, l := range layers {
			p, ok := byTarget["cow:"+l.Target]
			if !ok {
				continue
			}
			r, err := openPart(snap, p)
			if err != nil {
				return err
			}
			err = fs.ExtractTar(r, l.Upper)
			r.Close()
			if err != nil {
				return fmt.Errorf("restoring %s: %w", l.Target, err)
			}
		}
		return nil
	}
	sb, err := provision(ctx, snap.Spec, opts, prefill)
	if err != nil {
		return nil, err
	}
	rwSource := map[string]string{}
	for _, m := range snap.Spec.Mounts {
		if m.Access == ReadWrite {
			rwSource[m.Target] = m.Source
		}
	}
	for _, p := range snap.Parts {
		switch p.Kind {
		case "tmp", "home":
		case "rw":
			if !emptyDir(rwSource[p.Target]) {
				continue
			}
		default:
			continue
		}
		r, err := openPart(snap, p)
		if err != nil {
			sb.Terminate(context.Background())
			return nil, err
		}
		err = sb.fileOp(ctx, "untar", p.Target, nil, r, nil)
		r.Close()
		if err != nil {
			sb.Terminate(context.Background())
			return nil, fmt.Errorf("restoring %s: %w", p.Target, err)
		}
	}
	return sb, nil
}

// emptyDir reports whether dir is an existing directory with no entries.
func emptyDir(dir string) bool {
	if dir == "" {
		return false
	}
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return err == io.EOF && len(names) == 0
}

// ListSnapshots lists the snapshots in dir, oldest first; damaged ones
// are left out of the listing but stay on disk. A missing dir holds none.
func ListSnapshots(dir string) ([]*Snapshot, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), manifestName))
		if err != nil {
			continue
		}
		var snap Snapshot
		if json.Unmarshal(b, &snap) == nil {
			snap.Dir = filepath.Join(dir, e.Name())
			out = append(out, &snap)
		}
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// FindSnapshot finds the snapshot in dir whose id is ref or starts with
// it (ErrNotFound, ErrAmbiguous) and verifies it (see [LoadSnapshot]).
func FindSnapshot(dir, ref string) (*Snapshot, error) {
	all, err := ListSnapshots(dir)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(all))
	for i, snap := range all {
		ids[i] = snap.ID
	}
	id, err := resolveRef(ref, ids, "snapshot")
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: no snapshot %q (see tent snapshot ls)", ErrNotFound, ref)
	}
	if err != nil {
		return nil, err
	}
	return LoadSnapshot(all[slices.Index(ids, id)].Dir)
}
