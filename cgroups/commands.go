package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

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
