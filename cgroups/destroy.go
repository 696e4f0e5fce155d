package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

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
