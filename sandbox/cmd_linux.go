package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

// running is a started command's host-side state.
type running struct {
	init  *namespaces.Init
	cg    *cgroups.Cgroup
	proxy *netpolicy.Proxy // limited mode
	// proxyFDs are copies of the proxy's listening sockets (HTTP, SOCKS5),
	// kept for an idle supervisor to hand on (see SuperviseOptions).
	proxyFDs []int
	// pub serves the published ports of a long-lived sandbox (nil
	// without a network namespace of its own).
	pub *publisher
	// catchMu serialises catchNewPorts (proxyFDs, plan.cfg.CatchPorts).
	catchMu  sync.Mutex
	plan     *plan
	start    time.Time
	timedOut chan struct{} // closed when the timeout fired
	stop     func() bool   // stops the timeout and context watchers
	direct   *directRun    // reduced tier: no init (see reduced_linux.go)
	// ctxKilled is closed when the Cmd's context killed the sandbox.
	ctxKilled chan struct{}
	// stdio and tty are a one-shot command's stdio and terminal relay.
	stdio *stdio
	tty   *ttyRelay
}

// Start builds the sandbox and starts the command in it. Nothing is left
// behind when it fails.
func (c *Cmd) Start() (err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sb != nil {
		return c.startIn()
	}
	if c.run != nil {
		return errors.New("sandbox: already started")
	}
	if namespaces.IsInit() {
		return ErrInitMissing
	}
	if len(c.Args) == 0 {
		c.Args = []string{c.Path}
	}
	ctx := c.context()
	if reduced, why := wantReduced(&c.Spec); reduced {
		return c.startReduced(ctx, why)
	}
	r, err := boot(ctx, &c.Spec, c.Path, c.Args[1:], bootIO{stdin: c.Stdin, stdout: c.Stdout, stderr: c.Stderr, tty: c.TTY, netLog: c.NetLog, resolver: c.Resolver, log: c.logger(), id: randomID(), proxyLimits: c.ProxyLimits})
	if why, ok := fallBackToReduced(&c.Spec, err); ok {
		return c.startReduced(ctx, why)
	}
	if err != nil {
		return err
	}
	r.ctxKilled = make(chan struct{})
	stopCtx := context.AfterFunc(ctx, func() { close(r.ctxKilled); _ = r.init.Kill() })
	r.stop = stopCtx
	if t := c.Spec.Limits.Timeout; t > 0 {
		timer := time.AfterFunc(t, func() { close(r.timedOut); _ = r.init.Kill() })
		r.stop = func() bool { a := timer.Stop(); b := stopCtx(); return a && b }
	}
	c.run = r
	started := r.plan.report
	c.Report = &started
	return nil
}

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
	if spec.Root != nil && spec.Root.MakeMountPoints {
		if err := fs.MakeMountPoints(spec.Root.Path, p.cfg.Plan); err != nil {
			return nil, invalid(err)
		}
	}
	if err := p.makeLayers(bio.prefill); err != nil {
		return nil, err
	}
	if err := p.makeCADir(); err != nil {
		return nil, err
	}
	if err := r.createCgroup(spec, log); err != nil {
		return nil, err
	}
	log.Debug("cgroup ready", "elapsed", time.Since(start), "version", p.report.CgroupVersion)
	if r.cg != nil {
		if fd, ok := r.cg.FD(); ok {
			p.opts.CgroupFD = fd
		} else if tasks, err := r.cg.OpenSelfJoin(); err == nil {
			// cgroup v1: the init's clone joins it (namespaces.Options).
			p.opts.CgroupTasks = tasks
			defer closeFDs(tasks)
		} else {
			// A delegation that left tasks unwritable (only cgroup.procs
			// handed over): the host moves the init below, as before.
			log.Debug("cgroup tasks files", "err", err)
		}
	}
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
		return nil, err
	}
	if bio.tty != nil {
		sz := bio.tty.size()
		p.cfg.Exec.TTY = &namespaces.WindowSize{Rows: sz.Rows, Cols: sz.Cols}
	}
	files := r.stdio.files()
	p.opts.Stdin, p.opts.Stdout, p.opts.Stderr = files[0], files[1], files[2]
	p.cfg.IdleAfter = bio.idleAfter
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
	var fds []int
	if p.privileged && len(p.userMounts) > 0 {
		if fds, err = openUserMounts(p.userMounts, r.init.Pid(), p.uid, p.gid, p.defaultSeccomp); err != nil {
			return nil, err
		}
		defer closeFDs(fds)
	}
	if p.privileged && p.root != nil { // its descriptor follows the mounts' (fs.PlanInput.Root)
		fd, err := p.openRoot(r.init.Pid())
		if err != nil {
			return nil, err
		}
		fds = append(fds, fd)
		defer unix.Close(fd)
	}
	if r.cg != nil {
		// A pids limit is the commands' alone (cgroups.CommandsName): the
		// init's restricted threads join that child before they fork.
		join, err := r.cg.OpenCommandsJoin()
		if err != nil {
			return nil, fmt.Errorf("placing the commands in their cgroup: %w", err)
		}
		if join >= 0 {
			defer unix.Close(join)
			fds = append(fds, join)
			p.cfg.CommandsCgroup = true
		}
	}
	_, listeners, err := r.init.Run(&p.cfg, fds)
	if err != nil {
		return nil, startError(err)
	}
	if ph := r.init.Phases(); debug {
		// Where the init's start went (docs/benchmarks.md), from the
		// clone: each step's own time. Without cgo the init's exec is not
		// stamped: its first step then runs from the clone.
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
	if master := r.init.Terminal(); master != nil {
		if r.tty, err = startTTY(master, bio.tty, bio.stdin, bio.stdout, false, 0); err != nil {
			closeFDs(listeners)
			return nil, err
		}
	}
	if p.network != nil {
		for _, fd := range listeners {
			d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				closeFDs(listeners)
				return nil, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
			}
			r.proxyFDs = append(r.proxyFDs, d)
		}
		cfg := bio.proxyLimits.proxyConfig(bio.id)
		cfg.CA, cfg.UpstreamRoots = p.ca, testUpstreamRoots
		if r.proxy, err = startProxy(cfg, p.network, listeners, bio.netLog, bio.resolver, log); err != nil {
			return nil, err
		}
	}
	log.Debug("sandbox running", "path", path, "elapsed", time.Since(start))
	return r, nil
}

// Signal delivers sig to the command's foreground process group, as a
// terminal or a shell would, never to the sandbox's init: with [Cmd.TTY],
// to the terminal's foreground process group (the job in the foreground
// of a shell, whatever group it has); without, to the process group the
// command leads (it starts in a session and group of its own), which
// holds it and every descendant that did not move to a group of its own:
// `sh -c "sleep 30; echo done"` is interrupted as a whole by SIGINT.
// A group that has emptied falls back to the command itself. In the
// reduced tier (no namespaces) it is the command alone. Descendants in
// other process groups are reached only by the end of the sandbox (Wait,
// the context, Limits.Timeout).
func (c *Cmd) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	r, p := c.run, c.proc
	c.mu.Unlock()
	if p != nil {
		return p.Signal(sig)
	}
	if r == nil {
		return errors.New("sandbox: not started")
	}
	if r.direct != nil {
		return r.direct.signal(sig)
	}
	return r.init.Signal(sig)
}

// Wait waits for the command to exit, tears the sandbox down (no process,
// cgroup, mount or descriptor survives) and fills c.Report. A command that
// did not exit 0 yields an [*ExitError].
func (c *Cmd) Wait() error {
	c.mu.Lock()
	r, p := c.run, c.proc
	c.mu.Unlock()
	if p != nil {
		return c.waitIn(p)
	}
	if r == nil {
		return errors.New("sandbox: not started")
	}
	if r.direct != nil {
		return c.waitReduced(r)
	}
	status, waitErr := r.init.WaitExit()
	rep := r.endReport()
	_ = r.init.Kill() // the command is gone: take its descendants with the init
	if r.tty != nil {
		r.tty.wait(250 * time.Millisecond)
	}
	var stats cgroups.Stats
	if r.cg != nil {
		stats, _ = r.cg.Stats()
		rep.PeakMemory = stats.MemoryPeak
	}
	if r.proxy != nil {
		_ = r.proxy.Close() // the command is gone: end its tunnels
		rep.NetworkDenied = r.proxy.Denied()
	}
	teardownStart := time.Now()
	teardownErr := r.teardown(context.Background())
	// Every process of the sandbox is gone: the copies end at end of
	// file (the cut-off only guards against a leak).
	r.stdio.wait(5 * time.Second)
	r.stdio.close()
	c.Report = &rep
	c.logger().Debug("sandbox torn down", "exited", rep.WallTime, "teardown", time.Since(teardownStart))

	select {
	case <-r.ctxKilled:
		// The context ended the sandbox, as os/exec's Cmd reports it.
		if waitErr != nil || (status.Signaled() && status.Signal() == syscall.SIGKILL) {
			rep.Signal, rep.ExitCode = "killed", 128+int(syscall.SIGKILL)
			if teardownErr != nil {
				return teardownErr
			}
			return &ExitError{Report: c.Report, ctxErr: c.context().Err()}
		}
	default:
	}
	switch {
	case rep.TimedOut:
		rep.ExitCode = 124
	case waitErr != nil && stats.OOMKills > 0:
		// The init died with the command: the OOM killer took them both.
		rep.OOMKilled, rep.Signal, rep.ExitCode = true, "killed", 128+int(syscall.SIGKILL)
		return c.settle(nil, 0, teardownErr)
	case waitErr != nil:
		return errors.Join(fmt.Errorf("sandbox: %w", waitErr), teardownErr)
	}
	return c.settle(&status, stats.OOMKills, teardownErr)
}

// endReport stops r's watchers (timeout, context) and starts the report
// of the run: the plan's protections, the wall time, whether the timeout
// fired.
func (r *running) endReport() Report {
	wall := time.Since(r.start)
	r.stop()
	rep := r.plan.report
	rep.WallTime = wall
	select {
	case <-r.timedOut:
		rep.TimedOut = true
	default:
	}
	return rep
}

// settle completes c.Report from the command's wait status (nil when it
// is already filled in, or for a timeout) and the cgroup's OOM-kill count
// (any process of the command's tree: the cgroup is the sandbox's), and
// returns Wait's error: the teardown's, an *ExitError for a non-zero
// exit, or nil.
func (c *Cmd) settle(status *syscall.WaitStatus, oomKills int64, teardownErr error) error {
	rep := c.Report
	switch {
	case rep.TimedOut:
		rep.ExitCode = 124
	case status != nil:
		rep.setStatus(*status)
	}
	if oomKills > 0 {
		rep.OOMKilled = true
	}
	if teardownErr != nil {
		return teardownErr
	}
	if rep.ExitCode != 0 {
		return &ExitError{Report: c.Report}
	}
	return nil
}

// oomKills is the count of OOM kills in the sandbox's cgroup so far: 0
// without a cgroup or a memory controller.
func (r *running) oomKills() int64 {
	if r.cg == nil {
		return 0
	}
	n, _ := r.cg.OOMKills()
	return n
}

// teardown kills and reaps the init and removes the cgroup.
func (r *running) teardown(ctx context.Context) error {
	var errs []error
	if r.pub != nil {
		r.pub.close() // first: nothing new is dialled inside
	}
	if r.init != nil {
		_ = r.init.Kill()
		errs = append(errs, r.init.Close())
	}
	if r.tty != nil {
		r.tty.wait(0)
	}
	if r.proxy != nil {
		errs = append(errs, r.proxy.Close())
	}
	closeFDs(r.proxyFDs)
	r.proxyFDs = nil
	errs = append(errs, removeLayers(r.plan.cowRoot), removeCADir(r.plan.caDir))
	if r.cg != nil {
		errs = append(errs, r.cg.Destroy(ctx))
	}
	return errors.Join(errs...)
}

// startError classifies an init's refusal to start the command.
func startError(err error) error {
	var se *namespaces.StartError
	if errors.As(err, &se) {
		switch se.Stage {
		case "exec":
			if kind := startErrno(se.Errno); kind != nil {
				return fmt.Errorf("%w: %s", kind, se.Msg)
			}
		case "workdir":
			return fmt.Errorf("%w: %w: %w", ErrInvalidSpec, ErrWorkDir, &workDirError{path: se.Msg, errno: se.Errno})
		case "root":
			// ExecRequest.AsRoot where no nested user namespace can be made.
			return fmt.Errorf("%w: running as root: %s", ErrUnsupported, se.Msg)
		}
		return fmt.Errorf("sandbox setup failed at %s: %w", se.Stage, err)
	}
	return err
}

// hostError explains a failure to create the namespaces.
func hostError(err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EINVAL):
		return &UnsupportedError{Missing: []Missing{{
			Protection: "user namespace",
			Reason:     err.Error(),
			Fix:        "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, or on Ubuntu an AppArmor profile allowing userns); run `tent doctor`",
		}}}
	}
	return err
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}
