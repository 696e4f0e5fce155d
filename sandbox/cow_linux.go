package sandbox

import (
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/fs/layer"
)

// makeLayers creates the upper and work directories of the plan's cow
// mounts, owned by the sandbox's host identity.
func (p *plan) makeLayers(prefill func([]CowLayer) error) error {
	if p.cowRoot == "" {
		return nil
	}
	if err := os.Mkdir(p.cowRoot, 0o700); err != nil {
		return fmt.Errorf("cow layers: %w", err)
	}
	for _, step := range p.cfg.Plan.Steps {
		if step.Kind != fs.KindOverlay {
			continue
		}
		for _, d := range []string{filepath.Dir(step.Upper), step.Upper, step.Work} {
			if err := os.Mkdir(d, 0o700); err != nil && !os.IsExist(err) {
				return fmt.Errorf("cow layers: %w", err)
			}
		}
		// The overlay's root shows the upper directory's mode: the source's.
		if fi, err := os.Stat(step.Source); err == nil {
			_ = os.Chmod(step.Upper, fi.Mode().Perm())
		}
	}
	if prefill != nil {
		if err := prefill(p.layers); err != nil {
			return err
		}
	}
	if p.privileged {
		uid, gid := p.hostIDs()
		return filepath.WalkDir(p.cowRoot, func(path string, d iofs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, uid, gid)
		})
	}
	return nil
}

// removeLayers deletes the cow layers. Their contents were the
// sandbox's: layer.RemoveTree removes them descriptor-relative, never
// following a symlink, and makes directories writable first (overlay
// leaves work/work with no permissions).
func removeLayers(root string) error {
	if root == "" {
		return nil
	}
	return layer.RemoveTree(root)
}
