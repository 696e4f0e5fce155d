package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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

// CommandsName is the child cgroup of a sandbox cgroup that carries its
// pids limit (see [Create]).
const CommandsName = "commands"

// InitPidsAllowance is how many tasks more than its pids limit a sandbox
// cgroup allows in all, for the threads of the process that serves the
// sandbox (its init) outside [CommandsName]: a bound, should any task
// stay outside by mistake, not a share of the limit.
const InitPidsAllowance = 64

// addCommands makes the child that carries the pids limit (see
// [Create]): dir is the cgroup's directory in the pids hierarchy (v1) or
// its one directory (v2), where the limit plus InitPidsAllowance was set.
// On v2, cpuMax (cpu.max's value, "" for none) is set on the child too,
// where programs that read their CPU limit only in their own cgroup's
// directory (the Go runtime) find it; the cgroup's own applies anyway.
func (c *Cgroup) addCommands(dir string, pids int64, cpuMax string) error {
	child := filepath.Join(dir, CommandsName)
	if err := os.Mkdir(child, 0o755); err != nil {
		return fmt.Errorf("failed to create cgroup: %w", classify(c.version, err))
	}
	c.commands = child
	if c.version == V2 {
		if err := writeFile(filepath.Join(child, "cgroup.type"), "threaded"); err != nil {
			return fmt.Errorf("failed to make %s threaded: %w", child, classify(V2, err))
		}
		enable := "+pids"
		if cpuMax != "" {
			enable += " +cpu"
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), enable); err != nil {
			return fmt.Errorf("failed to enable %q for %s: %w", enable, child, classify(V2, err))
		}
		if cpuMax != "" {
			if err := writeFile(filepath.Join(child, "cpu.max"), cpuMax); err != nil {
				return fmt.Errorf("failed to set cpu.max of %s: %w", child, classify(V2, err))
			}
		}
	}
	if err := writeFile(filepath.Join(child, "pids.max"), strconv.FormatInt(pids, 10)); err != nil {
		return fmt.Errorf("failed to set pids.max of %s: %w", child, classify(c.version, err))
	}
	return nil
}

// OpenCommandsJoin opens the file through which a thread moves itself,
// alone, into the cgroup's [CommandsName] child by writing "0" to it: the
// child's tasks file (cgroup v1) or cgroup.threads (v2), O_WRONLY and
// close-on-exec; the caller closes it. A thread moving itself skips the
// kernel's global threadgroup lock (see [Cgroup.OpenSelfJoin]), and the
// file's write permission is checked here, at open. It returns -1 and
// nil when the cgroup has no such child (no pids limit).
func (c *Cgroup) OpenCommandsJoin() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commands == "" {
		return -1, nil
	}
	if c.destroyed {
		return -1, fmt.Errorf("joining %s: the cgroup is destroyed: %w", c.commands, errors.ErrUnsupported)
	}
	name := "tasks"
	if c.version == V2 {
		name = "cgroup.threads"
	}
	path := filepath.Join(c.commands, name)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("failed to open %s: %w", name, classify(c.version, &fs.PathError{Op: "open", Path: path, Err: err}))
	}
	return fd, nil
}

// OpenSelfJoin opens, on cgroup v1, the "tasks" file of the cgroup's
// directory in every hierarchy (O_WRONLY|O_CLOEXEC|O_NOFOLLOW) and
// returns the descriptors, which the caller closes. A single-threaded
// process that writes "0" to each of them moves itself into the cgroup —
// as a clone child does before it execs (namespaces.Options.CgroupTasks).
//
// Why not AddProc: a write to cgroup.procs, or of any pid but 0 to tasks,
// takes the kernel's global cgroup_threadgroup_rwsem for writing, and
// that waits for an RCU grace period: 1-20 ms per sandbox start on the
// 2-core development machine, where a process moving only itself skips
// the lock (about 20 µs). The file's write permission is checked when
// this process opens it; the kernel's ownership check of the move then
// passes for any process moving itself.
//
// On cgroup v2 (where writing "0" to cgroup.procs still takes that lock;
// use [Cgroup.FD] and CLONE_INTO_CGROUP) and after Destroy it returns
// nil and an error wrapping errors.ErrUnsupported.
func (c *Cgroup) OpenSelfJoin() ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != V1 || c.destroyed {
		return nil, fmt.Errorf("joining a cgroup through its tasks files: %w", errors.ErrUnsupported)
	}
	fds := make([]int, 0, len(c.dirs))
	for _, d := range c.dirs {
		path := filepath.Join(d.Path, "tasks")
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("failed to open cgroup tasks file: %w", classify(c.version, &fs.PathError{Op: "open", Path: path, Err: err}))
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// Freeze stops every process in the cgroup and its descendants and waits,
// bounded by ctx, until the kernel reports them frozen. Frozen processes
// cannot run, fork or exit; SIGKILL ends them on v2 but only once thawed on
// v1. v2 uses cgroup.freeze (Linux 5.2) and waits for "frozen 1" in
// cgroup.events; v1 writes FROZEN to freezer.state and waits until it reads
// FROZEN. Without a freezer the error wraps errors.ErrUnsupported.
func (c *Cgroup) Freeze(ctx context.Context) error {
	return c.setFrozen(ctx, true)
}

// Thaw lets the processes Freeze stopped run again, and waits, bounded by
// ctx, until the kernel reports the cgroup thawed.
func (c *Cgroup) Thaw(ctx context.Context) error {
	return c.setFrozen(ctx, false)
}

func (c *Cgroup) setFrozen(ctx context.Context, frozen bool) error {
	op := "thaw"
	if frozen {
		op = "freeze"
	}
	var err error
	if c.version == V2 {
		err = c.freezeV2(ctx, frozen)
	} else {
		state := "THAWED"
		if frozen {
			state = "FROZEN"
		}
		err = c.freezeV1(ctx, state)
	}
	if err != nil {
		return fmt.Errorf("failed to %s cgroup: %w", op, err)
	}
	return nil
}

// Kill sends SIGKILL to every process in the cgroup and its descendants and
// waits, bounded by ctx, until none is left. Double-forked and setsid'd
// processes are caught too: membership is inherited, not a process tree.
// On v2 it writes cgroup.kill (Linux 5.14). Otherwise (v1, older v2) it
// repeats, until cgroup.procs lists nothing: freeze (so no process forks
// while it is being killed), SIGKILL every listed pid, thaw.
// Zombies are not listed in cgroup.procs, so Kill does not wait for them to
// be reaped.
func (c *Cgroup) Kill(ctx context.Context) error {
	if c.version == V2 {
		err := c.killV2(ctx)
		if !errors.Is(err, errors.ErrUnsupported) {
			if err != nil {
				return fmt.Errorf("failed to kill cgroup %s: %w", c.dirs[0].Path, err)
			}
			return nil
		}
	}
	if err := c.killLoop(ctx); err != nil {
		return fmt.Errorf("failed to kill cgroup: %w", err)
	}
	return nil
}

// killLoop is Kill without cgroup.kill: freeze, SIGKILL each listed pid,
// thaw, until the cgroup is empty.
func (c *Cgroup) killLoop(ctx context.Context) error {
	canFreeze := c.version == V2
	if _, ok := c.dirFor("freezer"); ok {
		canFreeze = true
	}
	return poll(ctx, func() (bool, error) {
		pids, err := c.procs()
		if err != nil || len(pids) == 0 {
			return err == nil, err
		}
		if canFreeze {
			if err := c.setFrozen(ctx, true); err != nil && ctx.Err() == nil {
				canFreeze = false // e.g. no cgroup.freeze before Linux 5.2
			}
			// Thaw even if ctx ended meanwhile: frozen v1 tasks die only
			// once thawed, and the cgroup must not stay frozen.
			defer func() {
				tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_ = c.setFrozen(tctx, false)
			}()
			if pids, err = c.procs(); err != nil {
				return false, err
			}
		}
		var errs []error
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("failed to kill process %d: %w", pid, err))
			}
		}
		return false, errors.Join(errs...)
	})
}

// procs lists the processes in the cgroup and its descendants, in every
// hierarchy.
func (c *Cgroup) procs() ([]int, error) {
	var all []int
	for _, d := range c.dirs {
		dirs, err := subtree(d.Path)
		if err != nil {
			return nil, err
		}
		for _, dir := range dirs {
			pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				return nil, err
			}
			all = append(all, pids...)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// subtree returns dir and the cgroups below it, deepest first; none if dir
// is gone.
func subtree(dir string) ([]string, error) {
	// A cgroup directory's link count is 2 plus its subdirectories (on
	// kernfs, cgroup v1's and v2's): a sandbox's usually has none, which
	// one stat says without listing its dozens of files (every start's
	// teardown lists each hierarchy's directory twice).
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Nlink == 2 {
		return []string{dir}, nil
	}
	var out []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	slices.Reverse(out) // WalkDir visits parents before children
	return out, err
}

// Destroy kills every process left in the cgroup (see Kill), removes its
// directories in every hierarchy, child cgroups first, retrying EBUSY
// while dying processes leave (bounded by ctx), and closes the descriptor
// FD returned. After a successful Destroy further calls do nothing and
// return nil; after a failed one, calling it again retries. It returns the
// failures joined (errors.Join).
func (c *Cgroup) Destroy(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil
	}
	var errs []error
	removed := c.removeEmpty()
	if !removed {
		if err := c.Kill(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if c.fd >= 0 {
		if err := unix.Close(c.fd); err != nil {
			errs = append(errs, fmt.Errorf("failed to close cgroup descriptor: %w", err))
		}
		c.fd = -1
	}
	if !removed {
		for _, d := range slices.Backward(c.dirs) {
			dirs, err := subtree(d.Path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, dir := range dirs {
				if err := rmdir(ctx, dir); err != nil {
					errs = append(errs, fmt.Errorf("failed to remove cgroup: %w", err))
				}
			}
		}
	}
	if len(errs) == 0 {
		c.destroyed = true
	}
	return errors.Join(errs...)
}

// removeEmpty is Destroy's first try: remove every directory, children
// first, once. The kernel refuses (EBUSY) to remove a cgroup that holds a
// process, so success means nothing was left to kill, which is the usual
// case at a sandbox's end (its init reaped, the kernel has killed the
// rest of its pid namespace): one rmdir per directory instead of Kill's
// reads of every cgroup.procs, then the removal. It reports false,
// leaving what it could not remove, at the first failure; Destroy then
// kills and removes the rest. On cgroup v1 the freezer
// hierarchy goes first: while it holds a process nothing is removed, so
// Kill can still freeze what it kills (a process outside the freezer's
// cgroup could not be frozen anyway).
func (c *Cgroup) removeEmpty() bool {
	order := slices.Clone(c.dirs)
	slices.Reverse(order)
	if f, ok := c.dirFor("freezer"); ok && c.version == V1 {
		if i := slices.IndexFunc(order, func(d cgDir) bool { return d.Path == f }); i > 0 {
			d := order[i]
			order = slices.Insert(slices.Delete(order, i, i+1), 0, d)
		}
	}
	for _, d := range order {
		dirs, err := subtree(d.Path)
		if err != nil {
			return false
		}
		for _, dir := range dirs {
			if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
				return false
			}
		}
	}
	return true
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

// removeDirs removes the directories of a cgroup that was never used, when
// Create fails half way.
func (c *Cgroup) removeDirs() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var errs []error
	if c.commands != "" {
		if err := rmdir(ctx, c.commands); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("failed to remove cgroup after failed creation: %w", err))
		}
	}
	for _, d := range slices.Backward(c.dirs) {
		if err := rmdir(ctx, d.Path); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove cgroup after failed creation: %w", err))
		}
	}
	return errors.Join(errs...)
}
