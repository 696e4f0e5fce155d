package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox/internal/testhooks"
)

// bootIO is what a sandbox's start needs besides its spec.
type bootIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// tty runs the one-shot command on a terminal (Cmd.TTY).
	tty      *Terminal
	netLog   io.Writer
	resolver netpolicy.Resolver
	log      *slog.Logger
	// prefill, when set, fills the cow layers (a fork from a snapshot)
	// before the sandbox mounts them.
	prefill func([]CowLayer) error
	// idleAfter is ProvisionOptions.IdleAfter.
	idleAfter time.Duration
	// id names the sandbox in network audit records ("": a random one).
	id string
	// proxyLimits bound the limited network's proxy.
	proxyLimits ProxyLimits
	// secrets is ProvisionOptions.Secrets.
	secrets netpolicy.SecretSource
	// parentReaps and shareIPC are ProvisionOptions'.
	parentReaps, shareIPC bool
	// pidNS is ProvisionOptions.PIDNamespace.
	pidNS *os.File
	// sysfs is ProvisionOptions.Sysfs.
	sysfs bool
}

// boot builds a sandbox: a one-shot one running path with args, or, with
// an empty path, a long-lived one whose init waits for execs. Nothing is
// left behind when it fails.
func boot(ctx context.Context, spec *Spec, path string, args []string, bio bootIO) (_ *running, err error) {
	start := time.Now()
	log := bio.log
	if spec.Tier == TierReduced {
		return nil, errReducedLongLived
	}
	p, err := prepare(spec, path, args)
	if err != nil {
		return nil, err
	}
	if k, ok := ipcSysctl(spec.Sysctls); ok && bio.shareIPC {
		return nil, fmt.Errorf("%w: sysctls: %s: the sandbox shares its caller's IPC namespace, whose sysctls are that namespace's owner's", ErrInvalidSpec, k)
	}
	if bio.pidNS != nil {
		if err := namespaces.CheckPIDNamespace(bio.pidNS); err != nil {
			return nil, fmt.Errorf("%w: PIDNamespace: %w", ErrInvalidSpec, err)
		}
		if !p.privileged {
			return nil, fmt.Errorf("%w: PIDNamespace: joining a pid namespace (a pod's shareProcessNamespace) needs root", ErrUnsupported)
		}
		if p.cfg.LandlockABI < 6 {
			// There the init is not PID 1, which the kernel shields from
			// its namespace's signals: only Landlock's signal scope keeps
			// the commands from stopping it, or signalling the pod's other
			// processes.
			return nil, fmt.Errorf("%w: PIDNamespace: joining a pid namespace needs Landlock's signal scope (ABI 6, Linux 6.12), which keeps the sandbox's commands from signalling its init and the namespace's other processes; this kernel has ABI %d", ErrUnsupported, p.cfg.LandlockABI)
		}
	}
	if err := p.keepValuesOut(spec, bio.secrets); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &running{plan: p, start: start, timedOut: make(chan struct{})}
	defer func() {
		if err != nil {
			r.teardown(context.Background())
			if r.stdio != nil {
				r.stdio.closeChildEnds()
				r.stdio.close()
			}
		}
	}()
	log.Debug("prepared", "elapsed", time.Since(start))
	if err := r.prepareHost(spec, bio); err != nil {
		return nil, err
	}
	log.Debug("cgroup ready", "elapsed", time.Since(start), "version", p.report.CgroupVersion)
	tasks := r.cgroupJoin(log)
	defer closeFDs(tasks)
	if err := r.openInitStdio(path, bio); err != nil {
		return nil, err
	}
	p.cfg.IdleAfter = bio.idleAfter
	p.opts.ParentReaps, p.opts.ShareIPC, p.opts.PIDNamespace = bio.parentReaps, bio.shareIPC, bio.pidNS
	if bio.pidNS != nil && r.cg == nil {
		// Not PID 1 of its own namespace, the init takes nothing with it
		// when it ends: its cgroup is how the rest is killed.
		return nil, fmt.Errorf("%w: joining a pid namespace needs the sandbox's own cgroup (none could be made here)", ErrUnsupported)
	}
	if bio.parentReaps {
		p.cfg.IdleAfter = -1 // the idle holder's hand-off adopts a child
	}
	p.opts.Logger = log
	debug := log.Enabled(ctx, slog.LevelDebug)
	var cloneStart int64 // for the init's phases (-v)
	if debug {
		cloneStart = namespaces.Monotonic()
	}
	r.init, err = namespaces.Start(ctx, p.opts)
	r.stdio.closeChildEnds() // the init holds them (or failed)
	if err != nil {
		return nil, hostError(err)
	}
	if r.cg != nil && p.opts.CgroupFD < 0 && !r.init.JoinedCgroup() {
		// cgroup v1 on os/exec's path: the init waits for its config
		// before doing anything, so it is in place before any sandboxed
		// code runs.
		if err := r.cg.AddProc(r.init.Pid()); err != nil {
			return nil, fmt.Errorf("placing the sandbox in its cgroup: %w", err)
		}
	}
	log.Debug("init cloned", "elapsed", time.Since(start), "pid", r.init.Pid())
	if r.cg != nil {
		reapStaleCgroups(r.cg) // while the init's runtime starts
	}
	fds, err := r.initFDs(bio.sysfs)
	defer closeFDs(fds)
	if err != nil {
		return nil, err
	}
	_, listeners, err := r.init.Run(&p.cfg, fds)
	if err != nil {
		return nil, startError(err)
	}
	if ph := r.init.Phases(); debug {
		logPhases(log, ph, cloneStart)
	}
	if master := r.init.Terminal(); master != nil {
		if r.tty, err = startTTY(master, bio.tty, bio.stdin, bio.stdout, false, 0); err != nil {
			closeFDs(listeners)
			return nil, err
		}
	}
	if p.network != nil {
		if err := r.startNetwork(bio, listeners, log); err != nil {
			return nil, err
		}
	}
	log.Debug("sandbox running", "path", path, "elapsed", time.Since(start))
	return r, nil
}

// prepareHost makes what the sandbox needs on the host before its init
// starts: a caller's root's mount points, the cow layers, the proxy CA's
// directory and the cgroup.
func (r *running) prepareHost(spec *Spec, bio bootIO) error {
	p := r.plan
	if spec.Root != nil && spec.Root.MakeMountPoints {
		if err := fs.MakeMountPoints(spec.Root.Path, p.cfg.Plan); err != nil {
			return invalid(err)
		}
	}
	if err := p.makeLayers(bio.prefill); err != nil {
		return err
	}
	if err := p.makeCADir(); err != nil {
		return err
	}
	return r.createCgroup(spec, bio.log)
}

// cgroupJoin sets how the init's clone joins the sandbox's cgroup, when
// there is one. It returns the cgroup v1 tasks files to close once the
// init is cloned.
func (r *running) cgroupJoin(log *slog.Logger) (tasks []int) {
	if r.cg == nil {
		return nil
	}
	p := r.plan
	if fd, ok := r.cg.FD(); ok {
		p.opts.CgroupFD = fd
	} else if tasks, err := r.cg.OpenSelfJoin(); err == nil {
		// cgroup v1: the init's clone joins it (namespaces.Options).
		p.opts.CgroupTasks = tasks
		return tasks
	} else {
		// A delegation that left tasks unwritable (only cgroup.procs
		// handed over): the host moves the init below, as before.
		log.Debug("cgroup tasks files", "err", err)
	}
	return nil
}

// openInitStdio opens the init's stdio (r.stdio) and sets it, and the
// one-shot command's terminal, in the init's options.
func (r *running) openInitStdio(path string, bio bootIO) (err error) {
	p := r.plan
	// The init's fds 0-2 are the one-shot command's: the caller's files
	// where the sandbox's user can reopen them, else relayed pipes (see
	// stdio_linux.go); /dev/null for a long-lived sandbox and for a
	// command on a terminal, which never gets the caller's descriptors.
	if path != "" && bio.tty == nil {
		r.stdio, err = openCmdStdio(bio.stdin, bio.stdout, bio.stderr, stdioOwner(p))
	} else {
		r.stdio, err = openCmdStdio(nil, nil, nil, nil)
	}
	if err != nil {
		return err
	}
	if bio.tty != nil {
		sz := bio.tty.size()
		p.cfg.Exec.TTY = &namespaces.WindowSize{Rows: sz.Rows, Cols: sz.Cols}
	}
	files := r.stdio.files()
	p.opts.Stdin, p.opts.Stdout, p.opts.Stderr = files[0], files[1], files[2]
	return nil
}

// initFDs opens the descriptors the init gets with its config: a root
// caller's mounts and root (idmapped clones), a pod's procfs, a sysfs
// (with sysfs, for a root caller) and the commands' cgroup.
// The caller closes them, those returned with an error too.
func (r *running) initFDs(sysfs bool) (fds []int, err error) {
	p := r.plan
	if p.privileged && len(p.userMounts) > 0 {
		if fds, err = openUserMounts(p.userMounts, r.init.Pid(), p); err != nil {
			return nil, err
		}
	}
	if p.privileged && p.root != nil { // its descriptor follows the mounts' (fs.PlanInput.Root)
		fd, err := p.openRoot(r.init.Pid())
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
	}
	if proc := r.init.TakeProc(); proc >= 0 {
		// A pod's pid namespace: its procfs, made on the host.
		fds = append(fds, proc)
		if !p.cfg.Plan.UseProc(len(fds) - 1) {
			return fds, errors.New("joining a pid namespace: the mount plan has no /proc")
		}
	}
	if sysfs && p.privileged {
		fd, err := namespaces.Sysfs(r.init.Pid())
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
		if !p.cfg.Plan.AddSysfs(len(fds) - 1) {
			return fds, errors.New("sysfs: the mount plan has no /proc, or something at /sys already")
		}
	}
	if r.cg != nil {
		// A pids limit is the commands' alone (cgroups.CommandsName): the
		// init's restricted threads join that child before they fork.
		join, err := r.cg.OpenCommandsJoin()
		if err != nil {
			return fds, fmt.Errorf("placing the commands in their cgroup: %w", err)
		}
		if join >= 0 {
			fds = append(fds, join)
			p.cfg.CommandsCgroup = true
		}
	}
	return fds, nil
}

// logPhases logs where the init's start went (docs/benchmarks.md), from
// the clone (cloneStart): each step's own time. Without cgo the init's
// exec is not stamped: its first step then runs from the clone.
func logPhases(log *slog.Logger, ph namespaces.Phases, cloneStart int64) {
	var attrs []any
	from := cloneStart
	for _, p := range []struct {
		name string
		at   int64
	}{{"clone and exec", ph.Exec}, {"init runtime start", ph.Entry}, {"config received", ph.Config}, {"root built", ph.Root}, {"command started", ph.Started}, {"host told", namespaces.Monotonic()}} {
		if d := namespaces.Between(from, p.at); d > 0 {
			attrs = append(attrs, p.name, d)
			from = p.at
		}
	}
	log.Debug("init phases", attrs...)
}

// startNetwork starts the limited network's proxy on the init's
// listeners, keeping copies of them (r.proxyFDs).
func (r *running) startNetwork(bio bootIO, listeners []int, log *slog.Logger) (err error) {
	p := r.plan
	for _, fd := range listeners {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeFDs(listeners)
			return os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
		}
		r.proxyFDs = append(r.proxyFDs, d)
	}
	cfg := bio.proxyLimits.proxyConfig(bio.id)
	cfg.CA, cfg.UpstreamRoots, cfg.Secrets = p.ca, testhooks.UpstreamRoots, bio.secrets
	r.proxy, err = startProxy(cfg, p.network, listeners, bio.netLog, bio.resolver, log)
	return err
}
