package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/tent-sandbox/tent/cgroups"
)

// SetLimits changes the memory, pids and CPU limits of the running
// sandbox, in its cgroup: each of l's Memory, Pids and CPUs that is not
// zero replaces the limit in force, a zero one keeps it; Info's spec then
// has the new ones. The others (Timeout, NoFile) are fixed at provision
// time. It fails closed, changing nothing, with [ErrUnsupported] for a
// limit the host cannot apply live: any, on a sandbox without a cgroup
// (its limits degraded to rlimits, or absent); Pids on a sandbox
// provisioned without a pids limit; CPUs where its cgroup has no cpu
// controller (cgroup v2, provisioned without a CPU limit). Negative
// values are [ErrInvalidSpec]. Lowering Memory below what the sandbox
// uses makes the kernel reclaim, then OOM-kill (v2) or refuse (v1).
func (s *Sandbox) SetLimits(ctx context.Context, l Limits) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.Timeout != 0 || l.NoFile != 0 {
		return fmt.Errorf("%w: the timeout and nofile limits are fixed when a sandbox is provisioned", ErrUnsupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done:
		return ErrTerminated
	case s.run.cg == nil:
		return fmt.Errorf("%w: sandbox %s has no cgroup to change its limits in (run as root or under a delegated cgroup v2 subtree)", ErrUnsupported, s.id)
	}
	err := s.run.cg.SetLimits(cgroups.Limits{Memory: l.Memory, Pids: l.Pids, CPUs: l.CPUs})
	switch {
	case errors.Is(err, cgroups.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	case errors.Is(err, errors.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	case err != nil:
		return err
	}
	if l.Memory > 0 {
		s.spec.Limits.Memory = l.Memory
	}
	if l.Pids > 0 {
		s.spec.Limits.Pids = l.Pids
	}
	if l.CPUs > 0 {
		s.spec.Limits.CPUs = l.CPUs
	}
	return nil
}
