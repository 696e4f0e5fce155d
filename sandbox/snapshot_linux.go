package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
	parts, err := s.archiveParts(tmp, opts)
	if err != nil {
		return nil, err
	}
	snap.Parts = parts
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

// snapshotSource is a directory a snapshot archives through the
// sandbox's root: its part's kind and file name, and its path inside.
type snapshotSource struct{ kind, name, target string }

// archiveParts archives, into tmp, the cow layers and the sandbox's own
// writable directories: /tmp, home, Spec.Tmpfs, with
// opts.IncludeReadWrite its rw mounts, and a writable root.
func (s *Sandbox) archiveParts(tmp string, opts SnapshotOptions) ([]snapshotPart, error) {
	var parts []snapshotPart
	for i, l := range s.run.plan.layers {
		part, err := archiveHostDir(tmp, "cow-"+strconv.Itoa(i)+".tar.zst", l.Upper)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", l.Target, err)
		}
		part.Kind, part.Target = "cow", l.Target
		parts = append(parts, part)
	}
	sources := s.snapshotSources(opts)
	if len(sources) == 0 {
		return parts, nil
	}
	root, err := openSandboxRoot(s.run.init.Pid())
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer root.Close()
	for _, src := range sources {
		if src.kind == "root" {
			part, err := archiveRootInSandbox(tmp, src.name, root, s.run.plan.cfg.Plan)
			if err != nil {
				return nil, fmt.Errorf("snapshot of /: %w", err)
			}
			part.Kind, part.Target = src.kind, src.target
			parts = append(parts, part)
			continue
		}
		part, err := archiveInSandbox(tmp, src.name, root, src.target)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", src.target, err)
		}
		part.Kind, part.Target = src.kind, src.target
		parts = append(parts, part)
	}
	return parts, nil
}

// snapshotSources lists the sandbox's own tmpfs and rw mounts, archived
// through its init's root (the caller owns the sandbox's user namespace,
// so /proc/PID/root is open to it), opened once and walked beneath,
// never by path: see openInSandbox.
func (s *Sandbox) snapshotSources(opts SnapshotOptions) []snapshotSource {
	var sources []snapshotSource
	for _, st := range s.run.plan.cfg.Plan.Steps {
		switch {
		case st.Kind == fs.KindTmpfs && st.Target == "/tmp":
			sources = append(sources, snapshotSource{"tmp", "tmp.tar.zst", st.Target})
		case st.Kind == fs.KindTmpfs && st.Target == s.run.plan.cfg.Plan.Home:
			sources = append(sources, snapshotSource{"home", "home.tar.zst", st.Target})
		}
	}
	// Spec.Tmpfs, the sandbox's own like /tmp (for example tent serve's
	// /root).
	for i, t := range s.spec.Tmpfs {
		sources = append(sources, snapshotSource{"tmpfs", "tmpfs-" + strconv.Itoa(i) + ".tar.zst", t})
	}
	if opts.IncludeReadWrite {
		i := 0
		for _, st := range s.run.plan.cfg.Plan.Steps {
			if st.Kind != fs.KindBind || !st.User || st.ReadOnly {
				continue
			}
			// As the sandbox sees it (a root caller's rw mounts are
			// idmapped there).
			sources = append(sources, snapshotSource{"rw", "rw-" + strconv.Itoa(i) + ".tar.zst", st.Target})
			i++
		}
	}
	if s.spec.WritableRoot {
		// Last, so that forks restore it after the mounts' contents (it
		// never holds anything beneath them).
		sources = append(sources, snapshotSource{"root", "root.tar.zst", "/"})
	}
	return sources
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
