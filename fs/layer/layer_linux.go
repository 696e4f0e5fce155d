package layer

import (
	"fmt"
	"io"
)

// Diff lists what the sandbox changed in the layer, reading the host
// side only (the sandbox may be running).
func (l CowLayer) Diff() ([]Change, error) {
	changes, err := Diff(l.Source, l.Upper)
	if err != nil {
		return nil, fmt.Errorf("diff of %s: %w", l.Target, err)
	}
	return changes, nil
}

// WritePatch writes the layer's changes as a unified diff that `patch
// -p1` or `git apply` applies in its source directory.
func (l CowLayer) WritePatch(w io.Writer) error {
	changes, err := Diff(l.Source, l.Upper)
	if err != nil {
		return err
	}
	return WritePatch(w, l.Source, l.Upper, changes)
}

// ExportTo applies the layer's changes onto dir (for example a copy of
// its source, or the source itself to keep the sandbox's work): only
// regular files are copied (holes kept), and a deletion never reaches
// through a symlink (see ApplyChanges).
func (l CowLayer) ExportTo(dir string) error {
	changes, err := Diff(l.Source, l.Upper)
	if err != nil {
		return err
	}
	return ApplyChanges(dir, l.Upper, changes)
}
