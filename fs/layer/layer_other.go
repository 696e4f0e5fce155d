//go:build !linux

package layer

import (
	"errors"
	"io"
)

// errLayerNotLinux is the error of a CowLayer's methods outside Linux.
var errLayerNotLinux = errors.New("cow layers need Linux")

// Diff fails outside Linux.
func (l CowLayer) Diff() ([]Change, error) { return nil, errLayerNotLinux }

// WritePatch fails outside Linux.
func (l CowLayer) WritePatch(io.Writer) error { return errLayerNotLinux }

// ExportTo fails outside Linux.
func (l CowLayer) ExportTo(string) error { return errLayerNotLinux }
