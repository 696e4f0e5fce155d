package hostcheck

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Cgroup modes as [CgroupMode] reports them.
const (
	// CgroupUnified: cgroup v2 only.
	CgroupUnified = "unified"
	// CgroupHybrid: controllers on cgroup v1 hierarchies plus a cgroup2
	// mount (usually /sys/fs/cgroup/unified).
	CgroupHybrid = "hybrid"
	// CgroupLegacy: cgroup v1 only.
	CgroupLegacy = "legacy"
	// CgroupNone: no cgroup hierarchy is mounted.
	CgroupNone = "none"
)

// v1Controllers are the cgroup v1 controllers the kernel knows; a v1
// mount's super options name those it holds among other options (rw,
// xattr, release_agent=..., name=...).
var v1Controllers = []string{
	"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
}

// CgroupMounts is what [CgroupMode] found in a mountinfo file.
type CgroupMounts struct {
	// Mode is CgroupUnified, CgroupHybrid, CgroupLegacy or CgroupNone.
	Mode string
	// V2Root is the first cgroup2 mount point, "" if none.
	V2Root string
	// V1Controllers lists, sorted, the v1 controllers mounted anywhere.
	// Named hierarchies such as name=systemd hold no controller and are
	// left out.
	V1Controllers []string
}

// String returns, for example, "hybrid (v1: cpu, memory; v2 at
// /sys/fs/cgroup/unified)".
func (m CgroupMounts) String() string {
	var parts []string
	if len(m.V1Controllers) > 0 {
		parts = append(parts, "v1: "+strings.Join(m.V1Controllers, ", "))
	}
	if m.V2Root != "" {
		parts = append(parts, "v2 at "+m.V2Root)
	}
	if len(parts) == 0 {
		return m.Mode
	}
	return m.Mode + " (" + strings.Join(parts, "; ") + ")"
}

// CgroupMode reads a proc(5) mountinfo file (/proc/self/mountinfo) and
// reports how cgroups are mounted: a cgroup2 mount with no v1 controller
// mounted is unified (a named v1 hierarchy such as systemd's does not
// count), cgroup2 beside v1 controllers is hybrid, v1 controllers alone are
// legacy.
func CgroupMode(mountinfo io.Reader) (CgroupMounts, error) {
	var m CgroupMounts
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			return CgroupMounts{}, fmt.Errorf("mountinfo line %d is malformed: %q", n, sc.Text())
		}
		switch f[sep+1] {
		case "cgroup2":
			if m.V2Root == "" {
				m.V2Root = f[4]
			}
		case "cgroup":
			for o := range strings.SplitSeq(f[sep+3], ",") {
				if slices.Contains(v1Controllers, o) && !slices.Contains(m.V1Controllers, o) {
					m.V1Controllers = append(m.V1Controllers, o)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return CgroupMounts{}, fmt.Errorf("failed to read mountinfo: %w", err)
	}
	slices.Sort(m.V1Controllers)
	switch {
	case m.V2Root != "" && len(m.V1Controllers) == 0:
		m.Mode = CgroupUnified
	case m.V2Root != "":
		m.Mode = CgroupHybrid
	case len(m.V1Controllers) > 0:
		m.Mode = CgroupLegacy
	default:
		m.Mode = CgroupNone
	}
	return m, nil
}

// CgroupProbe is the outcome of trying to create a sandbox cgroup (for
// example with cgroups.CanCreate).
type CgroupProbe struct {
	// Version is "v1" or "v2": the interface that was (or would be) used;
	// "" or "none" when there is none.
	Version string
	// Controllers lists the controllers a sandbox cgroup gets.
	Controllers []string
	// Err is nil when this user can create a sandbox cgroup.
	Err error
}

// Fixes for a user who cannot create cgroups.
const (
	// CgroupFixV2 gives the caller a delegated cgroup v2 subtree.
	CgroupFixV2 = "run tent in a delegated cgroup: systemd-run --user --scope -p Delegate=yes tent run ..."
	// CgroupFixV1 is the only way on cgroup v1, which has no safe delegation.
	CgroupFixV1 = "run tent as root, or have an administrator create a cgroup owned by you in the memory, pids and cpu hierarchies (mkdir /sys/fs/cgroup/<ctrl>/tent-$USER && chown -R $USER /sys/fs/cgroup/<ctrl>/tent-$USER) and start tent inside it"
	// CgroupFixNone mounts cgroup v2.
	CgroupFixNone = "mount cgroup v2: mount -t cgroup2 none /sys/fs/cgroup (or boot with systemd.unified_cgroup_hierarchy=1)"
)

// Cgroups combines the mount layout and the creation probe: Available when
// this user can create a sandbox cgroup, else Degraded, since limits then
// fall back to rlimits (memory as RLIMIT_AS, pids as RLIMIT_NPROC, no CPU
// quota) that tent uses only with --best-effort.
func Cgroups(m CgroupMounts, p CgroupProbe) Result {
	if p.Err == nil && (p.Version == "v1" || p.Version == "v2") {
		d := fmt.Sprintf("%s; this user can create %s sandbox cgroups", m, p.Version)
		if len(p.Controllers) > 0 {
			d += " with " + strings.Join(p.Controllers, ", ")
		}
		return Result{Status: Available, Detail: d}
	}
	why := "no usable cgroup"
	if p.Err != nil {
		why = p.Err.Error()
	}
	r := Result{
		Status: Degraded,
		Detail: fmt.Sprintf("%s; cannot create a sandbox cgroup: %s; only rlimit fallbacks remain, so --memory/--pids/--cpus need --best-effort", m, why),
	}
	switch {
	case m.Mode == CgroupNone:
		r.Fix = CgroupFixNone
	case p.Version == "v2" || m.Mode == CgroupUnified:
		r.Fix = CgroupFixV2
	default:
		r.Fix = CgroupFixV1
	}
	return r
}
