package sandbox

import "github.com/tent-sandbox/tent/fs"

// CowLayer is the host side of a cow mount: the directory it overlays and
// the upper layer that holds the sandbox's changes.
type CowLayer struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Upper  string `json:"upper"`
}

// MountChanges are the changes of one cow mount.
type MountChanges struct {
	CowLayer
	Changes []fs.Change `json:"changes"`
}

// Change is one changed path of a cow mount (see fs.Diff).
type Change = fs.Change
