package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Cgroup is one sandbox's cgroup: a single directory on cgroup v2, or one
// directory per hierarchy on cgroup v1. Its methods are safe for concurrent
// use.
type Cgroup struct {
	version Version
	dirs    []cgDir // in creation order
	// commands is the child cgroup that carries the pids limit (see
	// [CommandsName]), or "" without one.
	commands string

	mu        sync.Mutex
	fd        int // v2 directory, or -1
	destroyed bool
}

// Create makes the cgroup name (one path element, for example "tent-<id>")
// for one sandbox, with l applied, and returns it empty: no process is in it
// until [Cgroup.AddProc] or a clone into [Cgroup.FD].
//
// Where: the cgroup is a child of this process's own cgroup, so it lives in
// whatever subtree was delegated to the caller and nests inside the
// caller's own limits.
//
//   - cgroup v2 (Unified hosts, and Hybrid hosts whose v2 hierarchy holds
//     the memory controller and every controller l needs): every controller
//     l needs must be listed in h.V2Controllers. Create enables them, and
//     memory and pids when available (for Stats), in the parent's
//     cgroup.subtree_control. The kernel refuses that while the parent
//     holds processes ("no internal processes", EBUSY); if the only one is
//     this process — as under `systemd-run --user --scope -p Delegate=yes
//     tent` — Create moves this process into a child cgroup named
//     "tent-supervisor" and creates sandboxes beside it; otherwise it fails
//     with ErrNotDelegated. It sets memory.max, memory.swap.max=0,
//     memory.oom.group=1, pids.max and cpu.max as l asks.
//   - cgroup v1 (other Hybrid hosts, Legacy hosts): a child directory in
//     each of the memory, pids, cpu and freezer hierarchies that is mounted
//     (a controller l needs must be). It sets memory.limit_in_bytes,
//     memory.memsw.limit_in_bytes (when swap accounting exists), pids.max,
//     cpu.cfs_period_us and cpu.cfs_quota_us as l asks, and leaves the OOM
//     killer enabled.
//
// A pids limit goes to a child cgroup, [CommandsName], that only the
// threads a program moves there (see [Cgroup.OpenCommandsJoin]), and
// what they fork, count against; the cgroup itself allows
// [InitPidsAllowance] tasks more. A sandbox's init, whose own threads
// would otherwise share the limit with its commands, is then never left
// without a thread when its commands fill it. On v1 the child is in the
// pids hierarchy alone; on v2 it is a threaded cgroup (cgroup.type
// "threaded", the pids controller enabled for it), which makes the
// cgroup a threaded domain: its memory and CPU limits still apply to
// everything in it.
//
// Creation is all or nothing: on error every directory Create made is
// removed (controllers enabled in the parent, and the move into
// tent-supervisor, stay). An existing cgroup of the same name is an error,
// never adopted. Errors keep the path and errno (*os.PathError); permission
// errors (EACCES, EPERM, EROFS) also wrap [ErrNotDelegated]; invalid limits
// or names wrap [ErrInvalid].
func Create(h *Host, name string, l Limits) (*Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	v, err := chooseVersion(h, l)
	if err != nil {
		return nil, err
	}
	if v == V1 {
		p, err := planV1(h, name, l)
		if err != nil {
			return nil, err
		}
		return applyV1(p)
	}
	parent, err := v2Parent(h)
	if err != nil {
		return nil, err
	}
	subtree, err := readFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Errorf("failed to read enabled controllers: %w", classify(V2, err))
	}
	p, err := planV2(h, name, l, strings.Fields(subtree))
	if err != nil {
		return nil, err
	}
	return applyV2(p)
}

// chooseVersion picks the cgroup version Create uses for l on h.
func chooseVersion(h *Host, l Limits) (Version, error) {
	switch h.Mode {
	case Unified:
		return V2, nil
	case Legacy:
		return V1, nil
	case Hybrid:
		for _, c := range append(l.controllers(), "memory") {
			if !slices.Contains(h.V2Controllers, c) {
				return V1, nil
			}
		}
		return V2, nil
	}
	return None, fmt.Errorf("no cgroup hierarchy is mounted: %w", errors.ErrUnsupported)
}

// Version reports whether c is a cgroup v1 or v2 cgroup.
func (c *Cgroup) Version() Version { return c.version }

// Paths returns the cgroup's directories: one on v2, one per hierarchy on
// v1.
func (c *Cgroup) Paths() []string {
	out := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		out[i] = d.Path
	}
	return out
}

// FD returns a descriptor of the v2 cgroup directory (O_RDONLY|O_DIRECTORY)
// for syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}: clone3 with
// CLONE_INTO_CGROUP (Linux 5.7) starts the child inside the cgroup, so no
// instruction of it runs outside. c owns the descriptor; Destroy closes it.
// FD returns -1, false on cgroup v1 (use AddProc) and after Destroy.
func (c *Cgroup) FD() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd, c.fd >= 0
}

// AddProc moves process pid, with all its threads, into the cgroup (its
// cgroup.procs) in every hierarchy. Children it forks afterwards start in
// the cgroup. On cgroup v2 the caller needs write access to the common
// ancestor of the process's current cgroup and c. Each call takes the
// kernel's global threadgroup lock (see [Cgroup.OpenSelfJoin]).
func (c *Cgroup) AddProc(pid int) error {
	for _, d := range c.dirs {
		if err := writeFile(filepath.Join(d.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("failed to move process %d into cgroup: %w", pid, classify(c.version, err))
		}
	}
	return nil
}

// dirFor returns the directory carrying controller: the one directory on
// v2, the controller's hierarchy on v1.
func (c *Cgroup) dirFor(controller string) (string, bool) {
	if c.version == V2 {
		return c.dirs[0].Path, true
	}
	for _, d := range c.dirs {
		if slices.Contains(d.Controllers, controller) {
			return d.Path, true
		}
	}
	return "", false
}

// apply carries out writes in order; optional writes to missing files are
// skipped.
func (c *Cgroup) apply(writes []fileWrite) error {
	for _, w := range writes {
		dir, ok := c.dirFor(w.Controller)
		if !ok {
			if w.Optional {
				continue
			}
			return fmt.Errorf("failed to set %s: no cgroup directory carries the %s controller", w, w.Controller)
		}
		err := writeFile(filepath.Join(dir, w.File), w.Value)
		if w.Optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("failed to set %s: %w", w, classify(c.version, err))
		}
	}
	return nil
}
