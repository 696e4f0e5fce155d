package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
)

var cgroupHost = sync.OnceValues(func() (*cgroups.Host, error) { return cgroups.Detect("/proc") })

// resolveLimits records which limits need a cgroup; the cgroup itself is
// created by Start. nofile is always an rlimit.
func (p *plan) resolveLimits(l Limits) {
	// A long-lived sandbox (no command yet) outlives a command the OOM
	// killer takes: the killer picks that process, not the whole group.
	p.limits = cgroups.Limits{Memory: l.Memory, Pids: l.Pids, CPUs: l.CPUs, PerProcessOOM: p.cfg.Exec.Path == ""}
	if l.NoFile > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_NOFILE, Cur: l.NoFile, Max: l.NoFile})
		p.report.add("nofile", Enforced, fmt.Sprintf("RLIMIT_NOFILE %d", l.NoFile))
	}
	if l.Timeout > 0 {
		p.report.add("timeout", Enforced, l.Timeout.String())
	}
}

// wantsCgroupLimits reports whether any limit needs a cgroup.
func (p *plan) wantsCgroupLimits() bool {
	return p.limits.Memory > 0 || p.limits.Pids > 0 || p.limits.CPUs > 0
}

// degradeToRlimits replaces cgroup limits with rlimits (best effort).
func (p *plan) degradeToRlimits(why error) {
	l := p.limits
	fix := "run as root, or under a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes tent ...)"
	if l.Memory > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_AS, Cur: uint64(l.Memory), Max: uint64(l.Memory)})
		p.missing = append(p.missing, Missing{Protection: "memory", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("memory", Degraded, "RLIMIT_AS (address space, per process): "+why.Error())
	}
	if l.Pids > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: uint64(l.Pids), Max: uint64(l.Pids)})
		p.missing = append(p.missing, Missing{Protection: "pids", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("pids", Degraded, "RLIMIT_NPROC (per user): "+why.Error())
	}
	if l.CPUs > 0 {
		p.missing = append(p.missing, Missing{Protection: "cpus", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("cpus", Absent, why.Error())
	}
}

// reportCgroupLimits is called once the sandbox's cgroup exists
// (p.report.CgroupPaths holds its directories) and before the init gets
// its config: it reports the limits the cgroup enforces and adds the
// sandbox's read-only view of its own cgroup to the mount plan.
func (p *plan) reportCgroupLimits(v cgroups.Version) {
	if host, err := cgroupHost(); err == nil && p.cfg.Plan != nil {
		// A host layout tent cannot mirror leaves the sandbox without
		// the view (no /sys), never without its limits.
		_ = p.cfg.Plan.AddCgroupView(cgroupView(host, v, p.report.CgroupPaths))
	}
	l := p.limits
	if l.Memory > 0 {
		p.report.add("memory", Enforced, fmt.Sprintf("cgroup %s: %d bytes, no swap", v, l.Memory))
	}
	if l.Pids > 0 {
		p.report.add("pids", Enforced, fmt.Sprintf("cgroup %s: %d", v, l.Pids))
	}
	if l.CPUs > 0 {
		p.report.add("cpus", Enforced, fmt.Sprintf("cgroup %s: %.2f cores", v, l.CPUs))
	}
}

// cgroupView describes the sandbox's cgroup directories paths (version v)
// for fs.Plan.AddCgroupView: on cgroup v2 its one directory; on cgroup v1
// each hierarchy's directory, named after the host's mount point of that
// hierarchy ("memory", "cpu,cpuacct"), with the host's other controller
// names of a co-mounted hierarchy as links. A v1 path beneath no mount
// point is left out.
func cgroupView(host *cgroups.Host, v cgroups.Version, paths []string) []fs.CgroupDir {
	if v == cgroups.V2 {
		if len(paths) != 1 {
			return nil
		}
		return []fs.CgroupDir{{Source: paths[0]}}
	}
	var dirs []fs.CgroupDir
	for _, dir := range paths {
		mount := ""
		for _, mp := range host.V1Mounts {
			if strings.HasPrefix(dir, mp+"/") && len(mp) > len(mount) {
				mount = mp
			}
		}
		if mount == "" {
			continue
		}
		d := fs.CgroupDir{Source: dir, Name: filepath.Base(mount)}
		for c, mp := range host.V1Mounts {
			if mp == mount && c != d.Name && !strings.Contains(c, "=") {
				d.Links = append(d.Links, c)
			}
		}
		slices.Sort(d.Links)
		dirs = append(dirs, d)
	}
	return dirs
}
