package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// v1Wanted are the cgroup v1 controllers a sandbox cgroup gets a directory
// in, when they are mounted: memory, pids and cpu for limits and stats,
// freezer for Freeze, Thaw and a race-free Kill. A cpuacct mounted apart
// from cpu is skipped: tent reads no CPU accounting.
var v1Wanted = []string{"memory", "pids", "cpu", "freezer"}

// v1Files returns the writes that apply l on cgroup v1, in order: the memory
// limit before the memory+swap limit (which may never be below it), the CFS
// period before the quota.
func v1Files(l Limits) []fileWrite {
	var w []fileWrite
	if l.Memory > 0 {
		m := strconv.FormatInt(l.Memory, 10)
		w = append(w,
			fileWrite{Controller: "memory", File: "memory.limit_in_bytes", Value: m},
			// Absent without swap accounting (CONFIG_MEMCG_SWAP, swapaccount=1).
			fileWrite{Controller: "memory", File: "memory.memsw.limit_in_bytes", Value: m, Optional: true})
	}
	if l.Pids > 0 { // the limit itself is the commands child's (Create)
		w = append(w, fileWrite{Controller: "pids", File: "pids.max", Value: strconv.FormatInt(l.Pids+InitPidsAllowance, 10)})
	}
	if l.CPUs > 0 {
		w = append(w,
			fileWrite{Controller: "cpu", File: "cpu.cfs_period_us", Value: strconv.Itoa(cpuPeriod)},
			fileWrite{Controller: "cpu", File: "cpu.cfs_quota_us", Value: strconv.FormatInt(l.quota(), 10)})
	}
	return w
}

// cgDir is one directory of a sandbox cgroup and the v1 controllers mounted
// on its hierarchy (nil for v2, whose one directory carries them all).
type cgDir struct {
	Path        string
	Controllers []string
}

// v1Plan is what Create does on cgroup v1: make Dirs in order, then
// Writes, then the commands child of Pids (see addCommands).
type v1Plan struct {
	Dirs   []cgDir
	Writes []fileWrite
	Pids   int64
}

// planV1 decides the directories (one per hierarchy, each a child named
// name of this process's own cgroup there) and writes for l. It reads
// nothing: a controller the limits need must be mounted, the others are
// used when they are.
func planV1(h *Host, name string, l Limits) (v1Plan, error) {
	var p v1Plan
	needed := l.controllers()
	for _, c := range needed {
		if h.V1Mounts[c] == "" {
			return p, fmt.Errorf("cgroup v1 controller %q is not mounted; it is needed to apply the limits", c)
		}
	}
	byPath := map[string]int{}
	for _, c := range v1Wanted {
		if h.V1Mounts[c] == "" {
			continue
		}
		own, err := h.dir(c)
		if err != nil {
			if slices.Contains(needed, c) {
				return p, err
			}
			continue
		}
		path := filepath.Join(own, name)
		if i, ok := byPath[path]; ok {
			p.Dirs[i].Controllers = append(p.Dirs[i].Controllers, c)
			continue
		}
		byPath[path] = len(p.Dirs)
		p.Dirs = append(p.Dirs, cgDir{Path: path, Controllers: []string{c}})
	}
	if len(p.Dirs) == 0 {
		return p, fmt.Errorf("none of the cgroup v1 controllers %s is usable", strings.Join(v1Wanted, ", "))
	}
	p.Writes = v1Files(l)
	p.Pids = l.Pids
	return p, nil
}

// applyV1 carries out p: all or nothing.
func applyV1(p v1Plan) (*Cgroup, error) {
	c := &Cgroup{version: V1, fd: -1}
	for _, d := range p.Dirs {
		if err := os.Mkdir(d.Path, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("failed to create cgroup: %w", classify(V1, err)), c.removeDirs())
		}
		c.dirs = append(c.dirs, d)
	}
	if err := c.apply(p.Writes); err != nil {
		return nil, errors.Join(err, c.removeDirs())
	}
	if p.Pids > 0 {
		dir, _ := c.dirFor("pids") // a pids limit needs the hierarchy (planV1)
		if err := c.addCommands(dir, p.Pids, ""); err != nil {
			return nil, errors.Join(err, c.removeDirs())
		}
	}
	return c, nil
}

// freezeV1 writes state (FROZEN or THAWED) to freezer.state and waits until
// it reads back. Freezing passes through FREEZING while tasks are being
// stopped; writing FROZEN again retries the tasks that did not stop yet.
func (c *Cgroup) freezeV1(ctx context.Context, state string) error {
	dir, ok := c.dirFor("freezer")
	if !ok {
		return fmt.Errorf("cannot freeze: cgroup v1 freezer controller is not mounted: %w", errors.ErrUnsupported)
	}
	path := filepath.Join(dir, "freezer.state")
	if err := writeFile(path, state); err != nil {
		return classify(V1, err)
	}
	start := time.Now()
	return poll(ctx, func() (bool, error) {
		s, err := readFile(path)
		if err != nil {
			return false, err
		}
		s = strings.TrimSpace(s)
		if s == state {
			return true, nil
		}
		if time.Since(start) > 10*time.Millisecond {
			if err := writeFile(path, state); err != nil {
				return false, err
			}
		}
		return false, nil
	})
}
