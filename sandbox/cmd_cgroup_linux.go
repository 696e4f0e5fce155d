package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
)

// createCgroup makes the sandbox's cgroup. Root always gets one (kill and
// statistics); others get one when the host delegates, and need one when
// they ask for limits.
func (r *running) createCgroup(s *Spec, log interface{ Debug(string, ...any) }) error {
	p := r.plan
	host, err := cgroupHost()
	if err == nil {
		r.cg, err = cgroups.Create(host, "tent-"+randomID(), p.limits)
	}
	if err != nil && p.privileged && host != nil && r.cg == nil {
		// Root whose own cgroup holds other processes (a shell, a CI step
		// on a systemd host): create the sandbox's cgroup at the top.
		if top, terr := host.AtRoot(); terr == nil {
			if cg, cerr := cgroups.Create(top, "tent-"+randomID(), p.limits); cerr == nil {
				r.cg, err = cg, nil
			}
		}
	}
	if err == nil {
		p.report.CgroupVersion = r.cg.Version().String()
		p.report.CgroupPaths = r.cg.Paths()
		p.reportCgroupLimits(r.cg.Version())
		return nil
	}
	log.Debug("no cgroup", "err", err)
	p.report.CgroupVersion = "none"
	if !p.wantsCgroupLimits() {
		if p.privileged {
			return fmt.Errorf("creating the sandbox cgroup: %w", err)
		}
		return nil
	}
	if !errors.Is(err, cgroups.ErrNotDelegated) {
		return invalid(fmt.Errorf("limits: %w", err))
	}
	p.degradeToRlimits(err)
	if host != nil {
		fixForHost(p.missing, host.Mode)
	}
	if !s.BestEffort {
		return &UnsupportedError{Missing: p.missing, Degradable: true}
	}
	return nil
}

// fixForHost rewrites the fix of missing cgroup limits for the cgroup
// layout this host actually has: cgroup v1 controllers (a hybrid or
// legacy hierarchy) cannot be delegated to an unprivileged user the way
// a cgroup v2 subtree can.
func fixForHost(missing []Missing, mode cgroups.Mode) {
	var fix string
	switch mode {
	case cgroups.Hybrid, cgroups.Legacy:
		fix = "this host's cgroup controllers are cgroup v1 (" + map[cgroups.Mode]string{cgroups.Hybrid: "hybrid", cgroups.Legacy: "legacy"}[mode] +
			" hierarchy), which an unprivileged user cannot be given: run as root, or boot with systemd.unified_cgroup_hierarchy=1 and run under a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes ...)"
	case cgroups.Unified:
		fix = "run as root, or under a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes ...)"
	default:
		fix = "mount cgroup2 (/sys/fs/cgroup) and run as root or under a delegated subtree"
	}
	for i, m := range missing {
		switch m.Protection {
		case "memory", "pids", "cpus":
			missing[i].Fix = fix
		}
	}
}

// staleAfter is how old an empty tent-* cgroup must be before another
// run removes it: the owner was killed (SIGKILL leaves no time to clean
// up) and its processes died with the init.
const staleAfter = 30 * time.Second

// reapStaleCgroups removes empty sibling tent-* cgroups (and their
// commands children) left by killed owners. rmdir fails on a cgroup that still has processes or children,
// so a live sandbox is never touched; errors are ignored. A start calls
// it once its own cgroup exists, where it costs no time: boot while the
// init's runtime starts (a stat of every sibling in every hierarchy, a
// few hundred microseconds on a host with many sandboxes).
func reapStaleCgroups(cg *cgroups.Cgroup) {
	mine := map[string]bool{}
	for _, p := range cg.Paths() {
		mine[p] = true
	}
	for p := range mine {
		siblings, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "tent-*"))
		for _, s := range siblings {
			fi, err := os.Stat(s)
			if mine[s] || err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < staleAfter || s == filepath.Join(filepath.Dir(p), "tent-supervisor") {
				continue
			}
			// A pids limit's child (cgroups.CommandsName) goes first, but
			// only when no process is left in the cgroup itself, where a
			// live sandbox's init is: a child empty between execs is still
			// that sandbox's.
			if procs, err := os.ReadFile(filepath.Join(s, "cgroup.procs")); err == nil && len(procs) == 0 {
				_ = os.Remove(filepath.Join(s, cgroups.CommandsName))
			}
			_ = os.Remove(s)
		}
	}
}
