package cgroups

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrInvalid is wrapped by every error about a [Limits] value or a cgroup
// name that no host could accept.
var ErrInvalid = errors.New("invalid cgroup request")

// Limits are the resource limits of one sandbox cgroup. The zero value of
// each field means "no limit"; negative values are invalid.
type Limits struct {
	// Memory is the most memory, in bytes, the cgroup's processes may use
	// together (anonymous memory, page cache, kernel memory). Reaching it
	// triggers reclaim and then the OOM killer inside the cgroup. Swap is
	// forbidden too: v2 memory.swap.max = 0, v1 memory.memsw.limit_in_bytes
	// = Memory (where swap accounting exists; without it the kernel has no
	// swap limit to set and none is applied). On v2 memory.oom.group = 1
	// (Linux 4.19), so an OOM kill takes the whole sandbox, not one process
	// (see PerProcessOOM).
	Memory int64
	// PerProcessOOM leaves memory.oom.group at 0 on v2: the OOM killer then
	// kills the largest process, as on v1, and the others go on. A
	// long-lived sandbox needs it, or one command over the limit would
	// take its init, and so the sandbox, down with it.
	PerProcessOOM bool
	// Pids is the most tasks (processes and threads) the cgroup's
	// [CommandsName] child may hold; fork and clone fail with EAGAIN
	// beyond it (see [Create]).
	Pids int64
	// CPUs is the CPU bandwidth in cores (0.5 = half a core), enforced by
	// CFS bandwidth control with a 100ms period. The resulting quota must be
	// at least 1ms, that is CPUs >= 0.01.
	CPUs float64
}

// cpuPeriod is the CFS bandwidth period, in microseconds.
const cpuPeriod = 100_000

// minQuota is the smallest CFS quota the kernel accepts, in microseconds.
const minQuota = 1_000

func (l Limits) validate() error {
	var errs []error
	if l.Memory < 0 {
		errs = append(errs, fmt.Errorf("negative Memory %d", l.Memory))
	}
	if l.Pids < 0 {
		errs = append(errs, fmt.Errorf("negative Pids %d", l.Pids))
	}
	switch {
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		errs = append(errs, fmt.Errorf("CPUs %v is not a number of cores", l.CPUs))
	case l.CPUs < 0:
		errs = append(errs, fmt.Errorf("negative CPUs %v", l.CPUs))
	case l.CPUs > float64(math.MaxInt64/cpuPeriod/2):
		errs = append(errs, fmt.Errorf("CPUs %v is too large", l.CPUs))
	case l.CPUs > 0 && l.quota() < minQuota:
		errs = append(errs, fmt.Errorf("CPUs %v is a quota of %dus per %dus, below the kernel's minimum of %dus (use at least 0.01)",
			l.CPUs, l.quota(), cpuPeriod, minQuota))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// quota is the CFS quota for l.CPUs, in microseconds per cpuPeriod.
func (l Limits) quota() int64 {
	return int64(math.Round(l.CPUs * cpuPeriod))
}

// controllers returns the controllers the limits need, in a fixed order.
func (l Limits) controllers() []string {
	var out []string
	if l.Memory > 0 {
		out = append(out, "memory")
	}
	if l.Pids > 0 {
		out = append(out, "pids")
	}
	if l.CPUs > 0 {
		out = append(out, "cpu")
	}
	return out
}

// fileWrite is one write of a cgroup plan: Value into File of the cgroup
// directory that carries Controller ("" for a core cgroup file).
type fileWrite struct {
	Controller string
	File       string
	Value      string
	// Optional writes are skipped when the file does not exist (a feature
	// the kernel was built without, or a controller not enabled).
	Optional bool
}

func (w fileWrite) String() string {
	s := w.File + "=" + w.Value
	if w.Optional {
		s += " (optional)"
	}
	return s
}

// validName checks that name can be a cgroup directory: one path element,
// not "." or "..", not a cgroup interface file name.
func validName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: cgroup name %q is not a directory name", ErrInvalid, name)
	case strings.ContainsAny(name, "/\x00\n"):
		return fmt.Errorf("%w: cgroup name %q contains '/', NUL or newline", ErrInvalid, name)
	case strings.HasPrefix(name, "cgroup."):
		return fmt.Errorf("%w: cgroup name %q starts with \"cgroup.\"", ErrInvalid, name)
	}
	return nil
}
