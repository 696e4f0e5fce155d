package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
)

// State describes an existing sandbox cgroup, for [Reopen]: a process that
// replaced itself with exec (tent's idle supervisor) manages the cgroup it
// created before.
type State struct {
	Version Version    `json:"version"`
	Dirs    []DirState `json:"dirs"`
}

// DirState is one directory of a cgroup and, on v1, the controllers of its
// hierarchy.
type DirState struct {
	Path        string   `json:"path"`
	Controllers []string `json:"controllers,omitempty"`
}

// State returns what [Reopen] needs to manage c again.
func (c *Cgroup) State() State {
	st := State{Version: c.version}
	for _, d := range c.dirs {
		st.Dirs = append(st.Dirs, DirState(d))
	}
	return st
}

// Reopen returns a Cgroup for the existing cgroup st describes. Every
// directory must exist and be a cgroup directory (it has cgroup.procs);
// the result has no descriptor ([Cgroup.FD] reports none: its init was
// started long ago).
func Reopen(st State) (*Cgroup, error) {
	if st.Version != V1 && st.Version != V2 || len(st.Dirs) == 0 || st.Version == V2 && len(st.Dirs) != 1 {
		return nil, fmt.Errorf("cgroup state: version %v with %d directories", st.Version, len(st.Dirs))
	}
	c := &Cgroup{version: st.Version, fd: -1}
	for _, d := range st.Dirs {
		if !filepath.IsAbs(d.Path) {
			return nil, fmt.Errorf("cgroup state: %q is not an absolute path", d.Path)
		}
		if _, err := os.Stat(filepath.Join(d.Path, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("cgroup state: %w", err)
		}
		c.dirs = append(c.dirs, cgDir{Path: filepath.Clean(d.Path), Controllers: d.Controllers})
	}
	return c, nil
}
