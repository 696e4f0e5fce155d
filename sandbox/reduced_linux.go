package sandbox

// The reduced tier: a one-shot command run without namespaces, for hosts
// where user namespaces are unavailable. See [Tier] for what it enforces
// and namespaces.KillTree for how its process tree is found and killed.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/internal/hostcheck"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/seccomp"
)

// userNSVerdict is whether this process can create user namespaces,
// judged from the sysctls and the AppArmor label under /proc (see
// hostcheck.UserNSAvailability): Missing means [TierAuto] runs the
// reduced tier. A trial clone is not made here: with TierAuto the
// sandbox's own clone is the trial, and its failure with EPERM, EACCES,
// ENOSPC or EINVAL also falls back to the reduced tier.
var userNSVerdict = sync.OnceValue(func() hostcheck.Result {
	return hostcheck.UserNSAvailability("/proc", os.Geteuid() == 0, nil)
})

// wantReduced decides, before anything is created, whether s runs in the
// reduced tier, and why.
func wantReduced(s *Spec) (bool, string) {
	switch s.Tier {
	case TierReduced:
		return true, "reduced tier requested"
	case TierAuto:
		if v := userNSVerdict(); v.Status == hostcheck.Missing {
			return true, "user namespaces are unavailable: " + v.Detail
		}
	}
	return false, ""
}

// fallBackToReduced reports whether a failure of the full tier's boot is
// the sandbox's clone being refused a user namespace, with TierAuto.
func fallBackToReduced(s *Spec, err error) (string, bool) {
	var ue *UnsupportedError
	if s.Tier != TierAuto || !errors.As(err, &ue) || len(ue.Missing) != 1 || ue.Missing[0].Protection != "user namespace" {
		return "", false
	}
	return "user namespaces are unavailable: creating one failed: " + ue.Missing[0].Reason, true
}

// errReducedLongLived refuses the reduced tier for long-lived sandboxes.
var errReducedLongLived = &UnsupportedError{Missing: []Missing{{
	Protection: "tier",
	Reason:     "the reduced tier runs one-shot commands only (tent run, sandbox.Cmd); a long-lived sandbox needs an init in its own namespaces",
	Fix:        "enable user namespaces (see tent doctor)",
}}}

// reducedPlan is what the reduced tier adds to a plan.
type reducedPlan struct {
	direct namespaces.Direct
	creds  *namespaces.Creds // root callers: the ids the command runs as
	user   string            // USER of the clean environment
}

// fixUserNS is the fix of what the reduced tier misses for want of a
// user namespace.
const fixUserNS = "enable user namespaces for the full tier (run `tent doctor`)"

// prepareReduced validates s for the reduced tier and plans the command:
// every protection the tier cannot give is a Missing (refused unless
// BestEffort) or, when it is only the tier's nature, reported.
func prepareReduced(s *Spec, name string, args []string, why string) (*plan, *reducedPlan, error) {
	if err := validate(s); err != nil {
		return nil, nil, invalid(err)
	}
	p := &plan{privileged: os.Geteuid() == 0}
	rp := &reducedPlan{}
	r := &p.report
	r.Tier = TierReduced
	r.Timeout, r.MemoryLimit = s.Limits.Timeout, s.Limits.Memory
	if s.Root != nil || s.WritableRoot || s.Sudo || len(s.Tmpfs) > 0 || len(s.MaskedPaths) > 0 || len(s.ReadOnlyPaths) > 0 {
		return nil, nil, &UnsupportedError{Missing: []Missing{{Protection: "root filesystem, writable root, sudo, tmpfs, masked and read-only paths",
			Reason: "the reduced tier has no mount namespace", Fix: fixUserNS}}}
	}
	if len(s.Sysctls) > 0 {
		return nil, nil, &UnsupportedError{Missing: []Missing{{Protection: "sysctls",
			Reason: "the reduced tier has no IPC or network namespace of its own: its sysctls would be the host's", Fix: fixUserNS}}}
	}

	r.add("user namespace", Absent, why)
	r.add("mount namespace", Absent, "reduced tier: the host's filesystem, restricted by Landlock")
	r.add("cgroup namespace", Absent, "reduced tier: /proc/self/cgroup shows host cgroup paths")
	r.add("ipc namespace", Degraded, "reduced tier: System V IPC and POSIX message queues denied by seccomp")
	p.reducedIdentity(s, rp)
	p.reducedMounts(s, rp)
	guard := p.reducedConfinement(s, rp)

	if err := p.resolveSeccomp(s); err != nil {
		return nil, nil, err
	}
	if len(p.cfg.Seccomp) > 0 {
		progs, err := seccomp.UnmarshalStack(p.cfg.Seccomp)
		if err != nil {
			return nil, nil, err
		}
		rp.direct.Programs = append(rp.direct.Programs, progs...)
	}
	gp, err := guardProgram(guard)
	if err != nil {
		return nil, nil, err
	}
	rp.direct.Programs = append(rp.direct.Programs, gp)
	p.resolveLimits(s.Limits)

	if err := p.reducedCommand(s, rp, name, args); err != nil {
		return nil, nil, err
	}
	if len(p.missing) > 0 && !s.BestEffort {
		return nil, nil, &UnsupportedError{Missing: p.missing, Degradable: true}
	}
	return p, rp, nil
}

// miss records a protection the sandbox lacks (prot, why, how to get it)
// and reports it with st and detail.
func (p *plan) miss(prot, reason, fix string, st Status, detail string) {
	p.missing = append(p.missing, Missing{Protection: prot, Reason: reason, Fix: fix})
	p.report.add(prot, st, detail)
}

// reducedIdentity sets the ids a reduced-tier command runs as (p.uid,
// p.gid; rp.creds for a root caller) and reports them, with the host
// name.
func (p *plan) reducedIdentity(s *Spec, rp *reducedPlan) {
	r := &p.report
	// Identity: the caller's own; a root caller's command never runs as
	// host root.
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if p.privileged {
		uid, gid = unprivilegedHostID, unprivilegedHostID
		if s.User != nil && s.User.UID != 0 {
			uid, gid = s.User.UID, s.User.GID
		} else if s.User != nil {
			p.miss("user", "uid 0 would be host root: the reduced tier has no user namespace to map it", fixUserNS,
				Degraded, fmt.Sprintf("runs as %d:%d instead", uid, gid))
		}
		rp.creds = &namespaces.Creds{UID: uid, GID: gid}
	} else if s.User != nil && (s.User.UID != uid || s.User.GID != gid) {
		p.miss("user", fmt.Sprintf("the reduced tier runs commands as the caller (%d:%d): without a user namespace no other identity can be mapped", uid, gid), fixUserNS,
			Absent, fmt.Sprintf("runs as %d:%d", uid, gid))
	}
	if s.IDRange != nil {
		p.miss("id_range", "the reduced tier has no user namespace to map a range of ids in", fixUserNS,
			Absent, fmt.Sprintf("every command runs as %d:%d", uid, gid))
	}
	p.uid, p.gid = uid, gid
	r.add("identity", Enforced, fmt.Sprintf("host uid %d, gid %d", uid, gid))

	if s.Hostname != "" {
		p.miss("hostname", "setting a hostname needs a uts namespace", fixUserNS, Absent, "the host's hostname is visible")
	} else {
		r.add("uts namespace", Absent, "reduced tier: the host's hostname is visible")
	}
}

// reducedMounts turns s's mounts into Landlock rules on their host
// paths; a mount elsewhere than its own path is not reachable.
func (p *plan) reducedMounts(s *Spec, rp *reducedPlan) {
	var reachable []fs.Mount
	for _, m := range s.Mounts {
		target := m.Target
		if target == "" {
			target = m.Source
		}
		if filepath.Clean(target) != filepath.Clean(m.Source) {
			p.miss("mount "+target, fmt.Sprintf("the reduced tier cannot mount: %s is reachable only at its host path", m.Source),
				"mount it at its own path (--ro/--rw "+m.Source+" without :DST), or "+fixUserNS, Absent, "not reachable")
			continue
		}
		if m.Access == fs.CopyOnWrite {
			p.miss("cow mount "+target, "copy-on-write needs an overlay in a mount namespace", fixUserNS, Degraded, "read-only instead")
		}
		reachable = append(reachable, m)
		p.report.add("mount "+target, Enforced, fmt.Sprintf("%s, Landlock rule on the host path", m.Access))
		if guards, _ := fs.FindGitDirs(m, nil); len(guards) > 0 && !s.GitWritable {
			p.miss("git control files in "+target,
				"the reduced tier cannot keep .git/hooks and .git/config read-only inside a writable mount (Landlock only adds access, and there is no mount namespace)",
				"let the sandbox write them (--rw-git, Spec.GitWritable), mount the repository --ro, or "+fixUserNS,
				Degraded, "the git control files there are writable")
		}
	}
	rp.direct.LandlockRules = fs.HostLandlockRules(reachable)
}

// reducedConfinement plans the reduced tier's network and Landlock
// confinement and reports what stands in for the namespaces it lacks. It
// returns the seccomp guard the command gets.
func (p *plan) reducedConfinement(s *Spec, rp *reducedPlan) seccomp.Guard {
	r := &p.report
	guard := seccomp.Guard{NoIPC: true}
	switch s.Network.Mode {
	case netpolicy.Host:
		r.add("network namespace", Absent, "--net host shares the host's network")
	case netpolicy.Limited:
		p.miss("network limited", "forcing traffic through tent's proxy needs a network namespace", fixUserNS, Degraded, "every network socket denied instead (none)")
		guard.NoNetwork = true
	default:
		guard.NoNetwork = true
		r.add("network namespace", Absent, "reduced tier")
	}
	rp.direct.NoTCP = guard.NoNetwork

	// Landlock.
	abi, err := fs.LandlockABI()
	switch {
	case err != nil || abi < 1:
		p.miss("landlock", fmt.Sprintf("without it the reduced tier has no filesystem isolation: %v", err),
			"use Linux 5.13 or later with Landlock enabled, or "+fixUserNS, Absent, fmt.Sprint(err))
	default:
		abi = min(abi, fs.MaxLandlockABI)
		rp.direct.LandlockABI = abi
		r.LandlockABI = abi
		r.add("landlock", Enforced, fmt.Sprintf("ABI %d, rules on host paths", abi))
	}
	if abi >= 6 {
		r.add("pid namespace", Degraded, fmt.Sprintf("reduced tier: host processes are visible in /proc; Landlock (ABI %d) denies signalling, ptracing and reading /proc/PID of processes outside the sandbox", abi))
	} else {
		p.miss("pid namespace", fmt.Sprintf("no pid namespace, and Landlock ABI %d < 6 cannot scope signals: the command could signal your other processes", abi),
			"use Linux 6.12 or later (Landlock ABI 6), or "+fixUserNS, Absent, "host processes can be signalled")
	}
	r.add("root filesystem", Degraded, "host root; Landlock allows only the system directories (read, execute), /proc (read), /dev/null and co, a private TMPDIR/HOME and the mounts")
	r.add("private /tmp", Degraded, "TMPDIR and HOME are a private directory removed afterwards; the host's /tmp is denied")
	net := "network"
	switch {
	case !guard.NoNetwork:
	case rp.direct.LandlockABI >= 4:
		r.add(net, Enforced, "none: seccomp denies socket() for every family but AF_UNIX; Landlock denies TCP bind and connect")
	default:
		r.add(net, Enforced, "none: seccomp denies socket() for every family but AF_UNIX")
	}
	r.add("no_new_privs", Enforced, "")
	if p.privileged {
		r.add("capabilities", Enforced, "all sets empty")
	} else {
		r.add("capabilities", Enforced, "effective, permitted, inheritable and ambient sets empty; the bounding set is kept (shrinking it needs CAP_SETPCAP; under no_new_privs an exec grants nothing)")
	}
	return guard
}

// reducedCommand plans the command name (args): its user and directory;
// its environment and the private directory are set by start.
func (p *plan) reducedCommand(s *Spec, rp *reducedPlan, name string, args []string) error {
	rp.user = os.Getenv("USER")
	if rp.user == "" || !validName(rp.user) || p.privileged {
		rp.user = fmt.Sprintf("user%d", p.uid)
	}
	rp.direct.Exec = namespaces.Exec{Path: name, Args: append([]string{name}, args...), Dir: s.Workdir}
	if rp.direct.Exec.Dir == "" {
		if cwd, err := os.Getwd(); err == nil {
			for _, m := range s.Mounts {
				if (m.Target == "" || m.Target == m.Source) && (cwd == m.Source || strings.HasPrefix(cwd, strings.TrimSuffix(m.Source, "/")+"/")) {
					rp.direct.Exec.Dir = cwd
				}
			}
		}
	} else if _, err := os.Stat(rp.direct.Exec.Dir); err != nil {
		return invalid(fmt.Errorf("workdir: in the reduced tier it is a host path: %w", err))
	}
	return nil
}

var guardPrograms sync.Map // seccomp.Guard → seccomp.Program

// guardProgram returns (once per variant) the guard profile's program,
// precompiled on x86-64.
func guardProgram(g seccomp.Guard) (seccomp.Program, error) {
	if p, ok := guardPrograms.Load(g); ok {
		return p.(seccomp.Program), nil
	}
	p, err := seccomp.GuardProgram(g)
	if err != nil {
		return nil, fmt.Errorf("compiling the reduced tier's seccomp guard: %w", err)
	}
	guardPrograms.Store(g, p)
	return p, nil
}
