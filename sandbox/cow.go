package sandbox

import "github.com/tent-sandbox/tent/fs/layer"

// CowLayer is the host side of a cow mount: the directory it overlays
// and the upper layer that holds the sandbox's changes. Its methods list
// the changes (Diff), write them as a patch (WritePatch) or apply them
// onto a directory (ExportTo).
type CowLayer = layer.CowLayer
