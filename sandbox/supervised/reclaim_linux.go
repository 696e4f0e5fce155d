package supervised

import (
	"os"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/sandbox/internal/handoff"
)

// nobodyID is the host uid and gid package sandbox runs a root caller's
// sandboxes as (the overflow id); their cow roots are owned by it.
const nobodyID = 65534

// Reclaim removes what a sandbox whose supervisor was killed could not:
// its cow layers, its cgroups (and the parents a child supervisor made),
// the temporary directory of a snapshot it
// was taking and the temporary file of a record it was saving. The record
// itself stays.
//
// Only what has the shape tent gives it is touched (see cowRootOf and
// validCgroupDir): a record is data, and data may lie.
func (s stateDir) Reclaim(rec *record) {
	if !validID(rec.ID) || s.checkDir() != nil {
		return
	}
	for _, l := range rec.Layers {
		if root, ok := cowRootOf(l.Upper, os.Geteuid()); ok {
			_ = layer.RemoveTree(root)
		}
	}
	var dirs []string
	for _, d := range rec.Cgroups {
		if validCgroupDir(d) {
			dirs = append(dirs, d)
		}
	}
	cgroups.Reclaim(dirs)
	_ = cgroups.RemoveJoined(rec.CgroupParents) // empty once the supervisor is gone
	handoff.RemoveSnapshotTemps(s.SnapshotsDir(), rec.ID)
	// The record's temporaries, beneath the checked directory's
	// descriptor; one a writer holds locked is left (see recordTemps).
	if d, err := s.openDir(); err == nil {
		_, _ = recordTemps(rec.ID).Clean(dirFD(d))
		d.Close()
	}
}
