package sandbox

// The reduced tier: a one-shot command run without namespaces, for hosts
// where user namespaces are unavailable. See [Tier] for what it enforces
// and namespaces.KillTree for how its process tree is found and killed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	miss := func(prot, reason, fix string, st Status, detail string) {
		p.missing = append(p.missing, Missing{Protection: prot, Reason: reason, Fix: fix})
		r.add(prot, st, detail)
	}
	const fixUserNS = "enable user namespaces for the full tier (run `tent doctor`)"
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

	// Identity: the caller's own; a root caller's command never runs as
	// host root.
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if p.privileged {
		uid, gid = unprivilegedHostID, unprivilegedHostID
		if s.User != nil && s.User.UID != 0 {
			uid, gid = s.User.UID, s.User.GID
		} else if s.User != nil {
			miss("user", "uid 0 would be host root: the reduced tier has no user namespace to map it", fixUserNS,
				Degraded, fmt.Sprintf("runs as %d:%d instead", uid, gid))
		}
		rp.creds = &namespaces.Creds{UID: uid, GID: gid}
	} else if s.User != nil && (s.User.UID != uid || s.User.GID != gid) {
		miss("user", fmt.Sprintf("the reduced tier runs commands as the caller (%d:%d): without a user namespace no other identity can be mapped", uid, gid), fixUserNS,
			Absent, fmt.Sprintf("runs as %d:%d", uid, gid))
	}
	p.uid, p.gid = uid, gid
	r.add("identity", Enforced, fmt.Sprintf("host uid %d, gid %d", uid, gid))

	if s.Hostname != "" {
		miss("hostname", "setting a hostname needs a uts namespace", fixUserNS, Absent, "the host's hostname is visible")
	} else {
		r.add("uts namespace", Absent, "reduced tier: the host's hostname is visible")
	}

	// Mounts become Landlock rules on their host paths.
	var reachable []fs.Mount
	for _, m := range s.Mounts {
		target := m.Target
		if target == "" {
			target = m.Source
		}
		if filepath.Clean(target) != filepath.Clean(m.Source) {
			miss("mount "+target, fmt.Sprintf("the reduced tier cannot mount: %s is reachable only at its host path", m.Source),
				"mount it at its own path (--ro/--rw "+m.Source+" without :DST), or "+fixUserNS, Absent, "not reachable")
			continue
		}
		if m.Access == fs.CopyOnWrite {
			miss("cow mount "+target, "copy-on-write needs an overlay in a mount namespace", fixUserNS, Degraded, "read-only instead")
		}
		reachable = append(reachable, m)
		r.add("mount "+target, Enforced, fmt.Sprintf("%s, Landlock rule on the host path", m.Access))
		if guards, _ := fs.FindGitDirs(m, nil); len(guards) > 0 && !s.GitWritable {
			miss("git control files in "+target,
				"the reduced tier cannot keep .git/hooks and .git/config read-only inside a writable mount (Landlock only adds access, and there is no mount namespace)",
				"let the sandbox write them (--rw-git, Spec.GitWritable), mount the repository --ro, or "+fixUserNS,
				Degraded, "the git control files there are writable")
		}
	}
	rp.direct.LandlockRules = fs.HostLandlockRules(reachable)

	// Network.
	guard := seccomp.Guard{NoIPC: true}
	switch s.Network.Mode {
	case netpolicy.Host:
		r.add("network namespace", Absent, "--net host shares the host's network")
	case netpolicy.Limited:
		miss("network limited", "forcing traffic through tent's proxy needs a network namespace", fixUserNS, Degraded, "every network socket denied instead (none)")
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
		miss("landlock", fmt.Sprintf("without it the reduced tier has no filesystem isolation: %v", err),
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
		miss("pid namespace", fmt.Sprintf("no pid namespace, and Landlock ABI %d < 6 cannot scope signals: the command could signal your other processes", abi),
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

	if err := p.resolveSeccomp(s); err != nil {
		return nil, nil, err
	}
	if len(p.cfg.Seccomp) > 0 {
		prog, err := seccomp.UnmarshalProgram(p.cfg.Seccomp)
		if err != nil {
			return nil, nil, err
		}
		rp.direct.Programs = append(rp.direct.Programs, prog)
	}
	gp, err := guardProgram(guard)
	if err != nil {
		return nil, nil, err
	}
	rp.direct.Programs = append(rp.direct.Programs, gp)
	p.resolveLimits(s.Limits)

	// The command; its environment and the private directory are set by
	// start.
	rp.user = os.Getenv("USER")
	if rp.user == "" || !validName(rp.user) || p.privileged {
		rp.user = fmt.Sprintf("user%d", uid)
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
		return nil, nil, invalid(fmt.Errorf("workdir: in the reduced tier it is a host path: %w", err))
	}
	if len(p.missing) > 0 && !s.BestEffort {
		return nil, nil, &UnsupportedError{Missing: p.missing, Degradable: true}
	}
	return p, rp, nil
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

// directRun is a reduced-tier command's host-side state.
type directRun struct {
	pid    int
	tmp    string
	stdio  *stdio
	exited chan struct{} // closed once the command is reaped
	status syscall.WaitStatus
	// subreaper is set when the process group and a child subreaper, not
	// a cgroup, find the command's descendants.
	subreaper bool
	// startTicks is the command's start time (proc(5) stat field 22).
	startTicks uint64
	killMu     sync.Mutex
}

// startReduced starts c in the reduced tier; c.mu is held.
func (c *Cmd) startReduced(ctx context.Context, why string) (err error) {
	start := time.Now()
	log := c.logger()
	p, rp, err := prepareReduced(&c.Spec, c.Path, c.Args[1:], why)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d := &directRun{exited: make(chan struct{})}
	r := &running{plan: p, start: start, timedOut: make(chan struct{}), direct: d}
	defer func() {
		if err != nil {
			if d.pid > 0 {
				d.kill(r)
			}
			_ = d.cleanup(r)
		}
	}()
	// The private TMPDIR and HOME.
	if d.tmp, err = os.MkdirTemp("", "tent-reduced-"); err != nil {
		return fmt.Errorf("creating the private temporary directory: %w", err)
	}
	if rp.creds != nil {
		if err := os.Chown(d.tmp, int(rp.creds.UID), int(rp.creds.GID)); err != nil {
			return fmt.Errorf("handing the private temporary directory to %d:%d: %w", rp.creds.UID, rp.creds.GID, err)
		}
	}
	rp.direct.LandlockRules = append(rp.direct.LandlockRules, fs.LandlockRule{Path: d.tmp, Access: fs.HandledAccess(fs.MaxLandlockABI)})
	// HOME and TMPDIR are layered over an inherited environment too (the
	// caller's HOME is denied anyway); the spec's Env still wins.
	private := []string{"HOME=" + d.tmp, "TMPDIR=" + d.tmp}
	// No network here (limited mode is refused or degraded to none), but
	// a secret's variable still holds a placeholder, never a value an
	// inherited environment would bring (--secret reads tent's own).
	for _, sec := range c.Spec.Network.Secrets {
		private = append(private, sec.Name+"="+netpolicy.NewPlaceholder())
	}
	rp.direct.Exec.Env = buildEnv(c.Spec.EnvInherit, private, c.Spec.Env, d.tmp, rp.user, os.Environ(), secretValues(c.Spec.Network.Secrets))
	if rp.direct.Exec.Dir == "" {
		rp.direct.Exec.Dir = d.tmp
	}
	rp.direct.Creds = rp.creds
	rp.direct.Rlimits = p.cfg.Rlimits

	if err := r.createCgroup(&c.Spec, log); err != nil {
		return err
	}
	if r.cg != nil {
		reapStaleCgroups(r.cg)
	}
	p.report.add("process tree kill", Enforced, "")
	if r.cg == nil {
		d.subreaper = true
		namespaces.AcquireSubreaper()
		p.report.Protections[len(p.report.Protections)-1] = Protection{Name: "process tree kill", Status: Degraded,
			Detail: "no cgroup: the command's process group and session, their descendants and orphans reparented to tent (a child subreaper) are killed; a descendant that leaves both and is orphaned while another reduced-tier run shares this process may be missed or mistaken"}
	}
	if d.stdio, err = openStdio(c.Stdin, orDiscard(c.Stdout), orDiscard(c.Stderr), 0); err != nil {
		return fmt.Errorf("setting up stdio: %w", err)
	}
	rp.direct.Stdio = d.stdio.fds
	var gateW *os.File
	if r.cg != nil {
		gr, gw, err := os.Pipe()
		if err != nil {
			return err
		}
		defer gr.Close()
		defer gw.Close()
		rp.direct.Gate, gateW = gr, gw
	}
	pid, stage, err := namespaces.StartDirect(rp.direct)
	d.stdio.closeChildEnds()
	if err != nil {
		var errno syscall.Errno
		if stage == "exec" && errors.As(err, &errno) {
			if kind := startErrno(errno); kind != nil {
				return fmt.Errorf("%w: %v", kind, err)
			}
		}
		return fmt.Errorf("sandbox setup failed at %s: %w", stage, err)
	}
	d.pid = pid
	d.startTicks = namespaces.StartTicks(pid) // before the reaper below can reap it
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
		d.status = syscall.WaitStatus(ws)
		close(d.exited)
	}()
	if gateW != nil {
		// The command is still tent's trampoline, waiting on the gate.
		if err := r.cg.AddProc(pid); err != nil {
			return fmt.Errorf("placing the command in its cgroup: %w", err)
		}
		if _, err := gateW.Write([]byte{1}); err != nil {
			return fmt.Errorf("releasing the command: %w", err)
		}
	}
	kill := func() { d.kill(r) }
	if t := c.Spec.Limits.Timeout; t > 0 {
		timer := time.AfterFunc(t, func() { close(r.timedOut); kill() })
		stopCtx := context.AfterFunc(ctx, kill)
		r.stop = func() bool { a := timer.Stop(); b := stopCtx(); return a && b }
	} else {
		r.stop = context.AfterFunc(ctx, kill)
	}
	log.Debug("reduced tier: command started", "pid", pid, "elapsed", time.Since(start), "why", why)
	c.run = r
	started := p.report
	c.Report = &started
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// signal forwards sig to the command while it runs.
func (d *directRun) signal(sig syscall.Signal) error {
	select {
	case <-d.exited:
		return errors.New("sandbox: command already exited")
	default:
	}
	return os.NewSyscallError("kill", unix.Kill(d.pid, sig))
}

// wait is Cmd.Wait for the reduced tier.
func (c *Cmd) waitReduced(r *running) error {
	d := r.direct
	<-d.exited
	rep := r.endReport()
	d.kill(r) // descendants the command left behind
	var oomKills int64
	if r.cg != nil {
		stats, _ := r.cg.Stats()
		rep.PeakMemory, oomKills = stats.MemoryPeak, stats.OOMKills
	}
	d.stdio.wait(time.Second)
	teardownErr := d.cleanup(r)
	c.Report = &rep
	status := d.status
	return c.settle(&status, oomKills, teardownErr)
}

// kill kills the command and every descendant: the cgroup when there is
// one, else what namespaces.KillTree finds.
func (d *directRun) kill(r *running) {
	d.killMu.Lock()
	defer d.killMu.Unlock()
	if r.cg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.cg.Kill(ctx)
		return
	}
	namespaces.KillTree(d.pid, d.startTicks)
}

// cleanup removes what the run created: the cgroup, the private
// directory, the stdio pipes, the subreaper reference.
func (d *directRun) cleanup(r *running) error {
	var errs []error
	if d.stdio != nil {
		d.stdio.closeChildEnds()
		d.stdio.close()
	}
	if r.cg != nil {
		errs = append(errs, r.cg.Destroy(context.Background()))
	}
	if d.tmp != "" {
		if err := os.RemoveAll(d.tmp); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d.tmp, err))
		}
	}
	if d.subreaper {
		d.subreaper = false
		namespaces.ReleaseSubreaper()
	}
	return errors.Join(errs...)
}
