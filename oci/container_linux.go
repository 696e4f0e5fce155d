package oci

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// A container is a sandbox of package supervised whose state directory
// is ROOT/ID, made by a child supervisor (supervised.Backend.LaunchChild:
// create's child, which the shim reaps, and which exits with the main
// process's status), beside tent-runc's own record of it, state.json:
// the bundle, the owner, the annotations and the sandbox's id.

// Statuses, as runc names them.
const (
	statusCreated = "created"
	statusRunning = "running"
	statusPaused  = "paused"
	statusStopped = "stopped"
)

// container is one container: its record and its sandbox.
type container struct {
	rec *record
	sb  *supervised.Sandbox
}

// backendAt opens the container's state directory dir as a supervised
// backend: its supervisor never idles (the shim may call at any time).
func backendAt(dir string) (*supervised.Backend, error) {
	return supervised.Open(dir, supervised.Options{IdleAfter: -1})
}

// openContainer reads container id's record under root and opens its
// sandbox.
func openContainer(ctx context.Context, root, id string) (*container, error) {
	rec, err := readRecord(root, id)
	if err != nil {
		return nil, err
	}
	b, err := backendAt(containerDir(root, id))
	if err != nil {
		return nil, err
	}
	sb, err := b.Sandbox(ctx, rec.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	return &container{rec: rec, sb: sb}, nil
}

// status is the container's, as runc names it: a sandbox whose
// supervisor is gone is stopped.
func (c *container) status(ctx context.Context) string {
	info, err := c.sb.Info(ctx)
	switch {
	case err != nil, info.State == sandbox.StateStopped:
		return statusStopped
	case info.State == sandbox.StateSuspended:
		return statusPaused
	}
	st, err := c.sb.MainState(ctx)
	switch {
	case errors.Is(err, sandbox.ErrStopped):
		return statusStopped
	case err != nil:
		return statusRunning // alive, but busy or stopping
	case st == supervised.MainCreated:
		return statusCreated
	case st == supervised.MainExited:
		return statusStopped
	}
	return statusRunning
}

// alive reports whether the container's supervisor runs.
func (c *container) alive(ctx context.Context) bool {
	info, err := c.sb.Info(ctx)
	return err == nil && info.State != sandbox.StateStopped
}

// pids lists the container's processes (host pids), from the sandbox's
// cgroup: its init (the pid the shim reaps) and every command.
func (c *container) pids() ([]int, error) {
	for _, dir := range c.rec.Cgroups {
		data, err := readSmall(dir+"/cgroup.procs", 1<<20)
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids)
		return pids, nil
	}
	return nil, fmt.Errorf("%w: the container has no cgroup to list its processes from", sandbox.ErrUnsupported)
}

// signalAll delivers sig to every process of the container but tent's
// init (kill --all).
func (c *container) signalAll(sig syscall.Signal) {
	pids, _ := c.pids()
	for _, pid := range pids {
		if pid != c.rec.InitPID { // it ends with the main process, with its status
			_ = unix.Kill(pid, sig)
		}
	}
}
