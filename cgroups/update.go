package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SetLimits changes the limits of a cgroup while its processes run: each
// of l's Memory, Pids and CPUs that is not zero replaces the limit in
// force; a zero one keeps it (a limit is never lifted here).
// PerProcessOOM is not read. It fails closed, changing nothing, with an
// error that wraps [errors.ErrUnsupported], for a limit the cgroup
// cannot take live: Pids on a cgroup made without one (it has no
// [CommandsName] child, where the threads it counts are), CPUs where no
// directory of the cgroup carries the cpu controller (a v2 cgroup made
// without a CPU limit has it disabled), Memory where none carries the
// memory controller. Invalid limits wrap [ErrInvalid]. A write the
// kernel refuses stops there (memory first, then pids, then CPU), with
// its error. Lowering the
// memory limit below what the cgroup uses makes the kernel reclaim,
// and then OOM-kill (v2) or refuse (v1, EBUSY).
func (c *Cgroup) SetLimits(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("setting limits: the cgroup is destroyed: %w", errors.ErrUnsupported)
	}
	writes, err := c.limitWrites(l)
	if err != nil {
		return err
	}
	for _, w := range writes {
		err := writeFile(w.path, w.value)
		if w.optional && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("failed to set %s=%s: %w", w.path, w.value, classify(c.version, err))
		}
	}
	return nil
}

// limitWrite is one write of SetLimits: value into the file at path.
type limitWrite struct {
	path, value string
	optional    bool
}

// limitWrites plans SetLimits' writes, in order, after checking that the
// cgroup can take every limit l sets.
func (c *Cgroup) limitWrites(l Limits) ([]limitWrite, error) {
	unsupported := func(controller, why string) error {
		return fmt.Errorf("%w: the cgroup cannot take a %s limit now: %s", errors.ErrUnsupported, controller, why)
	}
	var w []limitWrite
	if l.Memory > 0 {
		mem, err := c.memoryWrites(l.Memory)
		if err != nil {
			return nil, err
		}
		w = append(w, mem...)
	}
	if l.Pids > 0 {
		dir, ok := c.dirFor("pids")
		if !ok || c.commands == "" {
			return nil, unsupported("pids", "it was made without one")
		}
		w = append(w,
			limitWrite{path: filepath.Join(dir, "pids.max"), value: strconv.FormatInt(l.Pids+InitPidsAllowance, 10)},
			limitWrite{path: filepath.Join(c.commands, "pids.max"), value: strconv.FormatInt(l.Pids, 10)})
	}
	if l.CPUs > 0 {
		dir, ok := c.dirFor("cpu")
		file := "cpu.max"
		if c.version == V1 {
			file = "cpu.cfs_quota_us"
		}
		if _, err := os.Stat(filepath.Join(dir, file)); !ok || err != nil {
			return nil, unsupported("cpu", "it has no cpu controller (made without a CPU limit)")
		}
		if c.version == V2 {
			cpuMax := fmt.Sprintf("%d %d", l.quota(), cpuPeriod)
			w = append(w, limitWrite{path: filepath.Join(dir, "cpu.max"), value: cpuMax})
			if c.commands != "" { // mirrored there when it has one (see addCommands)
				w = append(w, limitWrite{path: filepath.Join(c.commands, "cpu.max"), value: cpuMax, optional: true})
			}
		} else {
			w = append(w,
				limitWrite{path: filepath.Join(dir, "cpu.cfs_period_us"), value: strconv.Itoa(cpuPeriod)},
				limitWrite{path: filepath.Join(dir, "cpu.cfs_quota_us"), value: strconv.FormatInt(l.quota(), 10)})
		}
	}
	return w, nil
}

// memoryWrites are the writes of a memory limit of n bytes: on v1 the
// memory+swap limit, which may never be below the memory limit, goes
// first when n raises the limit and last when it lowers it.
func (c *Cgroup) memoryWrites(n int64) ([]limitWrite, error) {
	dir, ok := c.dirFor("memory")
	file := "memory.max"
	if c.version == V1 {
		file = "memory.limit_in_bytes"
	}
	if _, err := os.Stat(filepath.Join(dir, file)); !ok || err != nil {
		return nil, fmt.Errorf("%w: the cgroup cannot take a memory limit now: it has no memory controller", errors.ErrUnsupported)
	}
	v := strconv.FormatInt(n, 10)
	if c.version == V2 {
		return []limitWrite{{path: filepath.Join(dir, "memory.max"), value: v}}, nil
	}
	mem := limitWrite{path: filepath.Join(dir, "memory.limit_in_bytes"), value: v}
	memsw := limitWrite{path: filepath.Join(dir, "memory.memsw.limit_in_bytes"), value: v, optional: true}
	cur, err := readFile(filepath.Join(dir, "memory.limit_in_bytes"))
	if old, perr := strconv.ParseInt(strings.TrimSpace(cur), 10, 64); err == nil && perr == nil && n > old {
		return []limitWrite{memsw, mem}, nil
	}
	return []limitWrite{mem, memsw}, nil
}
