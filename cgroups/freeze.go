package cgroups

import (
	"context"
	"fmt"
)

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
