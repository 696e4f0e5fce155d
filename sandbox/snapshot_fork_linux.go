package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/tent-sandbox/tent/fs/layer"
)

// openPart returns a decompressing reader of one part.
func openPart(snap *Snapshot, p snapshotPart) (io.ReadCloser, error) {
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
// mounts' changes (over the same host directories), its /tmp, $HOME,
// Spec.Tmpfs and, with Spec.WritableRoot, what it wrote at /.
// An rw mount's archive (IncludeReadWrite) is restored only into an empty
// host directory — one that was lost, or a fresh one on another host —
// and never over a directory that has contents: those are the host's
// live files, which another sandbox may share.
func Fork(ctx context.Context, snap *Snapshot, opts ProvisionOptions) (*Sandbox, error) {
	byTarget := map[string]snapshotPart{}
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
			err = layer.ExtractTar(r, l.Upper)
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
		case "tmp", "home", "tmpfs", "root":
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
		err = sb.File(ctx, FileRequest{Op: FileUntar, Path: p.Target, In: r})
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
