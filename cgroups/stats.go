package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// Stats are counters of a cgroup since its creation. A counter whose
// controller is not enabled for the cgroup reads 0.
type Stats struct {
	// MemoryPeak is the most memory, in bytes, the cgroup used at once: v2
	// memory.peak (Linux 5.19; on older kernels the current usage,
	// memory.current, is all there is), v1 memory.max_usage_in_bytes.
	MemoryPeak int64
	// OOMKills counts processes the OOM killer killed in the cgroup: the
	// oom_kill line of v2 memory.events (Linux 4.13) or of v1
	// memory.oom_control (Linux 4.13).
	OOMKills int64
	// Pids is the number of tasks (processes and threads) in the cgroup
	// now: pids.current.
	Pids int64
}

// Stats reads the cgroup's counters. Files that do not exist (a controller
// not enabled, an older kernel) leave their counter at 0; other read errors
// are returned joined, with the counters that could be read.
func (c *Cgroup) Stats() (Stats, error) {
	var s Stats
	var errs []error
	read := func(dst *int64, controller string, files ...string) {
		if err := c.readStat(dst, controller, files...); err != nil {
			errs = append(errs, err)
		}
	}
	if c.version == V2 {
		read(&s.MemoryPeak, "memory", "memory.peak", "memory.current")
	} else {
		read(&s.MemoryPeak, "memory", "memory.max_usage_in_bytes")
	}
	read(&s.OOMKills, "memory", c.oomFile())
	read(&s.Pids, "pids", "pids.current") // commands and the init's threads
	if len(errs) > 0 {
		return s, fmt.Errorf("failed to read cgroup stats: %w", errors.Join(errs...))
	}
	return s, nil
}

// OOMKills reads [Stats.OOMKills] alone (one file instead of Stats'
// three): a long-lived sandbox reads it before and after every command
// to tell an OOM kill of that command.
func (c *Cgroup) OOMKills() (int64, error) {
	var n int64
	if err := c.readStat(&n, "memory", c.oomFile()); err != nil {
		return n, fmt.Errorf("failed to read cgroup stats: %w", err)
	}
	return n, nil
}

// oomFile is the file whose oom_kill line counts OOM kills.
func (c *Cgroup) oomFile() string {
	if c.version == V2 {
		return "memory.events"
	}
	return "memory.oom_control"
}

// readStat sets *dst from the first of files that exists in
// controller's directory; a missing controller or files leave it as it
// is.
func (c *Cgroup) readStat(dst *int64, controller string, files ...string) error {
	dir, ok := c.dirFor(controller)
	if !ok {
		return nil
	}
	for _, f := range files {
		var n int64
		var err error
		if key, ok := statKeys[f]; ok {
			n, err = readKeyed(filepath.Join(dir, f), key)
		} else {
			n, err = readInt(filepath.Join(dir, f))
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue // try the next file, if any
		}
		*dst = n
		return err
	}
	return nil
}

// statKeys names the line to read in flat-keyed stat files.
var statKeys = map[string]string{
	"memory.events":      "oom_kill",
	"memory.oom_control": "oom_kill",
}
