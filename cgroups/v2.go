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

	"golang.org/x/sys/unix"
)

// leafName is the child cgroup this process moves itself into when its own
// v2 cgroup holds it and nothing else, so that the cgroup may enable
// controllers for its children (the "no internal processes" rule). A
// process already in a cgroup of that name creates sandboxes beside it.
const leafName = "tent-supervisor"

// v2Optional are controllers enabled for sandbox cgroups whenever they are
// available, even without a limit: they give Stats and an OOM kill of the
// whole group.
var v2Optional = []string{"memory", "pids"}

// v2Files returns the writes that apply l on cgroup v2.
func v2Files(l Limits) []fileWrite {
	var w []fileWrite
	if l.Memory > 0 {
		w = append(w,
			fileWrite{Controller: "memory", File: "memory.max", Value: strconv.FormatInt(l.Memory, 10)},
			// Absent without swap accounting (CONFIG_MEMCG_SWAP, swapaccount=1).
			fileWrite{Controller: "memory", File: "memory.swap.max", Value: "0", Optional: true})
	}
	// Linux 4.19; absent when the memory controller is not enabled.
	if !l.PerProcessOOM {
		w = append(w, fileWrite{Controller: "memory", File: "memory.oom.group", Value: "1", Optional: true})
	}
	if l.Pids > 0 { // the limit itself is the commands child's (Create)
		w = append(w, fileWrite{Controller: "pids", File: "pids.max", Value: strconv.FormatInt(l.Pids+InitPidsAllowance, 10)})
	}
	if l.CPUs > 0 {
		w = append(w, fileWrite{Controller: "cpu", File: "cpu.max", Value: fmt.Sprintf("%d %d", l.quota(), cpuPeriod)})
	}
	return w
}

// v2Plan is what Create does on cgroup v2: enable controllers in Parent's
// cgroup.subtree_control, make Dir, then Writes, then the commands child
// of Pids (see addCommands).
type v2Plan struct {
	Parent string
	Dir    string
	Enable []string
	Writes []fileWrite
	Pids   int64
	CPUMax string // cpu.max, mirrored on the commands child
}

// v2Parent returns the directory sandbox cgroups are created in: this
// process's own v2 cgroup, or its parent if this process already moved
// itself into leafName.
func v2Parent(h *Host) (string, error) {
	own, err := h.dir("")
	if err != nil {
		return "", err
	}
	if filepath.Base(own) == leafName {
		return filepath.Dir(own), nil
	}
	return own, nil
}

// planV2 decides where and how to create the sandbox cgroup name with limits
// l. subtree is the content of the parent's cgroup.subtree_control (the
// controllers already enabled for its children). Every controller l needs
// must be in h.V2Controllers.
func planV2(h *Host, name string, l Limits, subtree []string) (v2Plan, error) {
	var p v2Plan
	parent, err := v2Parent(h)
	if err != nil {
		return p, err
	}
	needed := l.controllers()
	for _, c := range needed {
		if !slices.Contains(h.V2Controllers, c) {
			return p, fmt.Errorf("%w: cgroup v2 controller %q is not available in %s (cgroup.controllers: %q); %s",
				ErrNotDelegated, c, parent, strings.Join(h.V2Controllers, " "), hintV2)
		}
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		want := slices.Contains(needed, c) || (slices.Contains(v2Optional, c) && slices.Contains(h.V2Controllers, c))
		if want && !slices.Contains(subtree, c) {
			p.Enable = append(p.Enable, c)
		}
	}
	p.Parent = parent
	p.Dir = filepath.Join(parent, name)
	p.Writes = v2Files(l)
	p.Pids = l.Pids
	if l.Pids > 0 && l.CPUs > 0 {
		p.CPUMax = fmt.Sprintf("%d %d", l.quota(), cpuPeriod)
	}
	return p, nil
}

// applyV2 carries out p. The sandbox cgroup is all or nothing; controllers
// enabled in the parent stay enabled (other sandboxes may rely on them, and
// systemd does the same), and so does a move of this process into leafName.
func applyV2(p v2Plan) (*Cgroup, error) {
	if len(p.Enable) > 0 {
		if err := enableControllers(p.Parent, p.Enable); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(p.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create cgroup: %w", classify(V2, err))
	}
	c := &Cgroup{version: V2, dirs: []cgDir{{Path: p.Dir}}, fd: -1}
	if err := c.apply(p.Writes); err != nil {
		return nil, errors.Join(err, c.removeDirs())
	}
	if p.Pids > 0 {
		if err := c.addCommands(p.Dir, p.Pids, p.CPUMax); err != nil {
			return nil, errors.Join(err, c.removeDirs())
		}
	}
	fd, err := unix.Open(p.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		err = &os.PathError{Op: "open", Path: p.Dir, Err: err}
		return nil, errors.Join(fmt.Errorf("failed to open cgroup: %w", err), c.removeDirs())
	}
	c.fd = fd
	return c, nil
}

// enableControllers writes "+c1 +c2" to parent's cgroup.subtree_control.
// The kernel refuses with EBUSY while parent (not the root) holds processes;
// if the only one is this process, it moves into parent/leafName and tries
// again.
func enableControllers(parent string, ctrls []string) error {
	path := filepath.Join(parent, "cgroup.subtree_control")
	value := "+" + strings.Join(ctrls, " +")
	err := writeFile(path, value)
	if errors.Is(err, unix.EBUSY) {
		if merr := moveSelfToLeaf(parent); merr != nil {
			return fmt.Errorf("%w: failed to enable controllers %q for children of %s: it holds processes, and cgroup v2 lets only a cgroup without processes hand controllers to children (%w); %s",
				ErrNotDelegated, value, parent, errors.Join(err, merr), hintV2)
		}
		err = writeFile(path, value)
	}
	if err != nil {
		return fmt.Errorf("failed to enable controllers %q for children of %s: %w", value, parent, classify(V2, err))
	}
	return nil
}

// moveSelfToLeaf moves this process into parent/leafName if it is the only
// process in parent.
func moveSelfToLeaf(parent string) error {
	pids, err := readPids(filepath.Join(parent, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := os.Getpid()
	if others := slices.DeleteFunc(pids, func(p int) bool { return p == self }); len(others) > 0 {
		return fmt.Errorf("%s holds %d other processes (for example pid %d)", parent, len(others), others[0])
	}
	leaf := filepath.Join(parent, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(self))
}

// freezeV2 writes 1 (freeze) or 0 (thaw) to cgroup.freeze (Linux 5.2) and
// waits until cgroup.events reports "frozen" with the same value.
func (c *Cgroup) freezeV2(ctx context.Context, frozen bool) error {
	dir := c.dirs[0].Path
	want := int64(0)
	if frozen {
		want = 1
	}
	if err := writeFile(filepath.Join(dir, "cgroup.freeze"), strconv.FormatInt(want, 10)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cgroup v2 freezer needs Linux 5.2: %w", errors.Join(err, errors.ErrUnsupported))
		}
		return classify(V2, err)
	}
	events := filepath.Join(dir, "cgroup.events")
	return poll(ctx, func() (bool, error) {
		n, err := readKeyed(events, "frozen")
		return err == nil && n == want, err
	})
}

// killV2 writes 1 to cgroup.kill (Linux 5.14), which sends SIGKILL to every
// process in the cgroup and its descendants at once, then waits until
// cgroup.events reports "populated 0". It returns errors.ErrUnsupported
// without cgroup.kill.
func (c *Cgroup) killV2(ctx context.Context) error {
	dir := c.dirs[0].Path
	err := writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return nil // the cgroup itself is gone: nothing to kill
		}
		return fmt.Errorf("cgroup.kill needs Linux 5.14: %w", errors.Join(err, errors.ErrUnsupported))
	}
	if err != nil {
		return classify(V2, err)
	}
	events := filepath.Join(dir, "cgroup.events")
	return poll(ctx, func() (bool, error) {
		n, err := readKeyed(events, "populated")
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		return err == nil && n == 0, err
	})
}
