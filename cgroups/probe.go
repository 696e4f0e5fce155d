package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CanCreate reports whether this process could create a sandbox cgroup with
// every limit tent knows (memory, pids and cpu) on h, and which version
// [Create] would use. The error says what is missing and how to fix it;
// permission problems wrap [ErrNotDelegated]. It is meant for `tent doctor`.
//
// CanCreate changes nothing on the host: it creates and removes a probe
// cgroup next to where sandbox cgroups would go. On cgroup v2 it does not
// enable controllers; it checks that cgroup.subtree_control is writable and
// that no process other than this one is in the parent (the "no internal
// processes" rule; the hierarchy's root is exempt).
func CanCreate(h *Host) (Version, error) {
	full := Limits{Memory: 1, Pids: 1, CPUs: 1}
	v, err := chooseVersion(h, full)
	if err != nil {
		return v, err
	}
	name := fmt.Sprintf("tent-probe-%d-%x", os.Getpid(), rand.Uint64())
	if v == V1 {
		p, err := planV1(h, name, full)
		if err != nil {
			return V1, err
		}
		for _, d := range p.Dirs {
			if err := probeDir(V1, d.Path); err != nil {
				return V1, err
			}
		}
		return V1, nil
	}

	parent, err := v2Parent(h)
	if err != nil {
		return V2, err
	}
	subtree, err := readFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return V2, fmt.Errorf("failed to read enabled controllers: %w", classify(V2, err))
	}
	p, err := planV2(h, name, full, strings.Fields(subtree))
	if err != nil {
		return V2, err
	}
	if len(p.Enable) > 0 {
		path := filepath.Join(parent, "cgroup.subtree_control")
		if err := unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS); err != nil {
			err = &os.PathError{Op: "access", Path: path, Err: err}
			return V2, fmt.Errorf("cannot enable controllers %s for children: %w", strings.Join(p.Enable, ", "), classify(V2, err))
		}
		if err := checkNoOtherProcs(parent); err != nil {
			return V2, err
		}
	}
	return V2, probeDir(V2, p.Dir)
}

// checkNoOtherProcs reports an ErrNotDelegated error if parent, a non-root
// v2 cgroup, holds processes other than this one: it could then not enable
// controllers for children, and Create could not move out of the way.
func checkNoOtherProcs(parent string) error {
	if _, err := os.Stat(filepath.Join(parent, "cgroup.type")); errors.Is(err, fs.ErrNotExist) {
		return nil // the root cgroup, which alone may hold processes and enable controllers
	}
	pids, err := readPids(filepath.Join(parent, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := os.Getpid()
	if others := slices.DeleteFunc(pids, func(p int) bool { return p == self }); len(others) > 0 {
		return fmt.Errorf("%w: %s holds %d processes besides this one (for example pid %d), so it cannot hand controllers to child cgroups; %s",
			ErrNotDelegated, parent, len(others), others[0], hintV2)
	}
	return nil
}

// probeDir creates and removes the empty cgroup dir.
func probeDir(v Version, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create a cgroup: %w", classify(v, err))
	}
	// An empty cgroup that nothing joined: rmdir succeeds at once.
	if err := unix.Rmdir(dir); err != nil {
		time.Sleep(10 * time.Millisecond)
		if err := unix.Rmdir(dir); err != nil {
			return fmt.Errorf("failed to remove probe cgroup: %w", &os.PathError{Op: "rmdir", Path: dir, Err: err})
		}
	}
	return nil
}

// CanCreateFor is CanCreate for the cgroups of sandboxes this process
// starts: below h, or, for root whose own cgroup holds other processes (a
// shell, a CI step on a systemd host), at the top of the hierarchy, where
// sandboxes then go.
func CanCreateFor(h *Host) (Version, error) {
	v, err := CanCreate(h)
	if err != nil && os.Geteuid() == 0 {
		if top, terr := h.AtRoot(); terr == nil {
			if tv, terr := CanCreate(top); terr == nil {
				return tv, nil
			}
		}
	}
	return v, err
}
