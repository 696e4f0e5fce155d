package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox/internal/testhooks"
)

// Sandbox is a long-lived sandbox: provisioned once, it runs any number
// of commands, concurrently, until Terminate. Its methods are safe for
// concurrent use.
type Sandbox struct {
	id   string
	spec Spec
	run  *running

	mu        sync.Mutex
	nextExec  int
	done      bool
	suspended bool
	ended     chan struct{} // closed by Terminate
	deadline  time.Time     // the end of Limits.Timeout (zero without)
	created   time.Time     // when it was provisioned

	procs procTable // its processes (Handle.Start)

	secrets netpolicy.SecretSource // ProvisionOptions.Secrets
}

// Provision builds a sandbox from spec whose init waits for commands.
// Limits.Timeout, when set, bounds the sandbox's whole life.
func Provision(ctx context.Context, spec Spec, opts ProvisionOptions) (*Sandbox, error) {
	return provision(ctx, spec, opts, nil)
}

func provision(ctx context.Context, spec Spec, opts ProvisionOptions, prefill func([]CowLayer) error) (*Sandbox, error) {
	if namespaces.IsInit() {
		return nil, ErrInitMissing
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id := opts.ID
	if id == "" {
		id = randomID()
	}
	if opts.Resolver == nil {
		opts.Resolver = testhooks.Resolver // nil but in tests
	}
	if opts.Secrets != nil {
		opts.Secrets = &ownValues{next: opts.Secrets}
	}
	var err error
	if spec.Network.Secrets, err = inlineSecrets(spec.Network.Secrets, opts.Secrets); err != nil {
		return nil, err
	}
	r, err := boot(ctx, &spec, "", nil, bootIO{netLog: opts.NetLog, resolver: opts.Resolver, log: log, prefill: prefill, idleAfter: opts.IdleAfter, id: id, proxyLimits: opts.ProxyLimits, secrets: opts.Secrets, parentReaps: opts.ParentReaps, shareIPC: opts.ShareIPC, pidNS: opts.PIDNamespace, sysfs: opts.Sysfs})
	if err != nil {
		return nil, err
	}
	if opts.ParentReaps {
		r.exitStatus = opts.ExitStatus
		if r.exitStatus == nil {
			r.exitStatus = func() int { return 128 + int(syscall.SIGKILL) }
		}
	}
	go r.init.Serve()
	s := &Sandbox{id: id, spec: spec, run: r, ended: make(chan struct{}), created: time.Now(), secrets: opts.Secrets}
	r.stop = func() bool { return true }
	if r.direct == nil && !r.plan.opts.ShareNet {
		r.pub = newPublisher(r.init, log)
	}
	s.spec.Ports = nil
	for _, m := range spec.Ports {
		if _, err := s.Publish(ctx, m); err != nil {
			return nil, errors.Join(err, s.Terminate(context.Background()))
		}
	}
	if t := spec.Limits.Timeout; t > 0 {
		s.deadline = time.Now().Add(t)
		timer := time.AfterFunc(t, func() { _ = s.Terminate(context.Background()) })
		r.stop = timer.Stop
	}
	return s, nil
}

// Usage reads what the sandbox uses now from its cgroups; a sandbox
// without a cgroup (an unprivileged caller without delegation) fails with
// [ErrUnsupported].
func (s *Sandbox) Usage() (Usage, error) {
	dirs := s.cgroupPaths()
	if len(dirs) == 0 {
		return Usage{}, fmt.Errorf("%w: sandbox %s has no cgroup to read its usage from (see tent doctor)", ErrUnsupported, s.id)
	}
	return cgroups.ReadUsage(dirs), nil
}

// Info describes the sandbox now: its id, state (stopped once it has
// ended: Terminate, its Limits.Timeout, its init's death), the spec it
// runs with (mounts and network rules applied since included), its
// init's host pid, cgroups, protections and cow layers. Created is when
// it was provisioned; Backend is "local".
func (s *Sandbox) Info() Info {
	st := StateRunning
	s.mu.Lock()
	suspended := s.suspended
	s.mu.Unlock()
	switch {
	case ended(s):
		st = StateStopped
	case suspended:
		st = StateSuspended
	}
	return Info{ID: s.id, Backend: localName, State: st, Created: s.created, Spec: s.spec, InitPID: s.run.init.Pid(),
		CgroupPaths: s.cgroupPaths(), Protections: append([]Protection(nil), s.run.plan.report.Protections...),
		Layers: append([]CowLayer(nil), s.run.plan.layers...)}
}

// cgroupPaths are the sandbox's cgroup directories.
func (s *Sandbox) cgroupPaths() []string {
	return append([]string(nil), s.run.plan.report.CgroupPaths...)
}

// Exec runs one command and waits for it. Cancelling ctx kills it. A
// command that cannot start returns an error (ErrCommandNotFound,
// ErrNotExecutable, ...); a command that ran returns its result, whatever
// its exit code. It is Start + Wait on the sandbox's processes: while it
// runs, [Sandbox.Processes] lists it and [Sandbox.Process] finds it by
// pid; its stdio is req's (files are handed to the command as they are),
// not a ring's, and its record goes when it returns.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	before := s.NetworkDenied()
	res, err := s.procs.exec(ctx, s, req)
	if res != nil {
		res.NetworkDenied = deniedSince(before, s.NetworkDenied())
	}
	return res, err
}

// deniedSince returns the denials in after beyond those in before (what
// happened during one exec, give or take a concurrent one).
func deniedSince(before, after []netpolicy.Denial) []netpolicy.Denial {
	type key struct {
		host   string
		port   int
		reason string
	}
	seen := map[key]int{}
	for _, d := range before {
		seen[key{d.Host, d.Port, d.Reason}] = d.Count
	}
	var out []netpolicy.Denial
	for _, d := range after {
		if n := d.Count - seen[key{d.Host, d.Port, d.Reason}]; n > 0 {
			d.Count = n
			out = append(out, d)
		}
	}
	return out
}

// exec runs req; with helper, req.Args are the arguments of tent's file
// helper.
func (s *Sandbox) exec(ctx context.Context, req ExecRequest, helper bool) (*ExecResult, error) {
	p, err := s.start(ctx, req, helper)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// Start starts a command in the sandbox and returns its handle without
// waiting for it, as [os/exec.Cmd.Start] does: [Job.Wait] waits for
// it and returns what [Sandbox.Exec] would have (Exec is Start then
// Wait). req is read as Exec reads it; its Signals channel and Timeout
// apply while Wait runs, and ctx ending kills the command then. The
// command's stdio is served until Wait returns, so Wait must be called
// (a command whose output nobody reads blocks on a full pipe, as with
// os/exec).
func (s *Sandbox) Start(ctx context.Context, req ExecRequest) (*Job, error) {
	return s.start(ctx, req, false)
}

func (s *Sandbox) start(ctx context.Context, req ExecRequest, helper bool) (*Job, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return nil, fmt.Errorf("%w: exec needs a command", ErrInvalidSpec)
	}
	for i, kv := range req.Env {
		if k, _, ok := cutEnv(kv); !ok || k == "" {
			return nil, fmt.Errorf("%w: env %d: %q is not KEY=VALUE", ErrInvalidSpec, i+1, kv)
		}
	}
	if req.MaxOutput < 0 {
		return nil, fmt.Errorf("%w: MaxOutput %d is negative: want a byte count, or 0 for the default", ErrInvalidSpec, req.MaxOutput)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if err := s.checkRunning("running commands"); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.nextExec++
	id := strconv.Itoa(s.nextExec)
	s.mu.Unlock()

	base := s.run.plan.cfg.Exec
	var err error
	e := namespaces.Exec{Path: req.Args[0], Args: req.Args, Env: mergeEnv(append(append([]string{}, base.Env...), req.Env...)), Dir: base.Dir, FileHelper: helper, Root: req.AsRoot && !helper}
	if req.Dir != "" {
		e.Dir = req.Dir
	}
	if e.User, err = execUser(s.run.plan, s.spec.User, req); err != nil {
		return nil, err
	}
	if helper || e.Root {
		// tent's file helper, and AsRoot's nested root, run as the
		// init's ids, with no group and no capability.
		e.User = nil
	}
	var sio *stdio
	if req.TTY != nil {
		sz := req.TTY.size()
		e.TTY = &namespaces.WindowSize{Rows: sz.Rows, Cols: sz.Cols}
		sio = &stdio{} // nothing of the caller's is passed in
	} else if sio, err = openStdioFor(req.Stdin, req.Stdout, req.Stderr, req.MaxOutput, stdioOwner(s.run.plan)); err != nil {
		return nil, err
	}
	p := &Job{s: s, id: id, ctx: ctx, req: req, sio: sio, oomBefore: s.run.oomKills(), start: time.Now()}
	pid, master, exited, err := s.run.init.Exec(id, e, sio.fds)
	sio.closeChildEnds()
	if err != nil {
		sio.close()
		if errors.Is(err, namespaces.ErrInitGone) {
			return nil, fmt.Errorf("%w: %w", ErrTerminated, err)
		}
		return nil, startError(err)
	}
	p.Pid, p.exited = pid, exited
	if master != nil {
		if p.tty, err = startTTY(master, req.TTY, req.Stdin, req.Stdout, true, req.MaxOutput); err != nil {
			_ = s.run.init.KillExec(id)
			<-exited
			sio.close()
			return nil, err
		}
	}
	return p, nil
}

// Job is a command started in a sandbox by [Sandbox.Start].
type Job struct {
	// Pid is the command's process id inside the sandbox (its own pid
	// namespace), as the sandbox's ps shows it.
	Pid int

	s         *Sandbox
	id        string
	ctx       context.Context
	req       ExecRequest
	sio       *stdio
	tty       *ttyRelay
	exited    <-chan namespaces.ExecExit
	oomBefore int64
	start     time.Time

	waitOnce sync.Once
	res      *ExecResult
	err      error
}

// Signal delivers sig to the command's foreground process group (the
// command itself, unless it runs a job-control shell on a terminal).
func (p *Job) Signal(sig syscall.Signal) error {
	return p.s.run.init.SignalExec(p.id, sig)
}

// Resize sets the size of the command's terminal (ExecRequest.TTY), as
// a resize sent on TTY.Resize does; a command without one fails.
func (p *Job) Resize(sz WindowSize) error {
	if p.tty == nil {
		return errors.New("sandbox: the command has no terminal to resize")
	}
	p.tty.resize(sz)
	return nil
}

// CloseStdin ends the command's input, fed from ExecRequest.Stdin's
// reader: the command reads end of file once it has read what came
// before, as closing os/exec's StdinPipe does. A file given as Stdin is
// the caller's to close, and fails here.
func (p *Job) CloseStdin() error { return p.sio.closeInput() }

// Kill kills the command's whole session.
func (p *Job) Kill() error { return p.s.run.init.KillExec(p.id) }

// Wait waits for the command to exit and its output to be copied, and
// returns its result as [Sandbox.Exec] does; later calls return the same.
func (p *Job) Wait() (*ExecResult, error) {
	p.waitOnce.Do(func() { p.res, p.err = p.wait() })
	return p.res, p.err
}

func (p *Job) wait() (*ExecResult, error) {
	s, req, ctx := p.s, p.req, p.ctx
	defer p.sio.close()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(max(req.Timeout-time.Since(p.start), 0))
		defer t.Stop()
		timeout = t.C
	}
	res := &ExecResult{}
	var ex namespaces.ExecExit
	for waiting := true; waiting; {
		select {
		case ex = <-p.exited:
			waiting = false
		case sig := <-req.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = s.run.init.SignalExec(p.id, ss)
			}
		case <-timeout:
			res.TimedOut = true
			_ = s.run.init.KillExec(p.id)
			ex = <-p.exited
			waiting = false
		case <-ctx.Done():
			_ = s.run.init.KillExec(p.id)
			ex = <-p.exited
			waiting = false
		}
	}
	res.Duration = time.Since(p.start)
	if tty := p.tty; tty != nil {
		tty.wait(250 * time.Millisecond)
		if tty.sink != nil {
			res.StdoutTruncated = tty.sink.truncated
			if tty.sink.buf != nil {
				res.Stdout = tty.sink.buf.Bytes()
			}
		}
	}
	p.sio.wait(250 * time.Millisecond)
	if ex.Err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTerminated, ex.Err)
	}
	p.sio.fill(res)
	res.setStatus(ex.Status)
	// A kill for ctx is ours, not the OOM killer's.
	res.OOMKilled = ctx.Err() == nil && !res.TimedOut && s.run.oomKills() > p.oomBefore
	if err := ctx.Err(); err != nil && !res.TimedOut {
		return res, err
	}
	return res, nil
}

// SetNetworkPolicy replaces the rules of a limited sandbox (see
// [Cmd.SetNetworkPolicy]).
func (s *Sandbox) SetNetworkPolicy(ctx context.Context, p NetworkPolicy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done {
		return ErrTerminated
	}
	var err error
	if p.Secrets, err = inlineSecrets(p.Secrets, s.secrets); err != nil {
		return err
	}
	p, compiled, err := s.run.prepareNetworkPolicy(p)
	if err != nil {
		return err
	}
	// Names the new rules allow on ports not caught yet are caught from
	// now on too (a one-shot Cmd keeps the ports it started with: its
	// init answers no requests): first, so that a policy whose ports
	// cannot be caught changes nothing. A port caught early is harmless:
	// the proxy judges its connections by the policy in force.
	if err := s.run.catchNewPorts(compiled); err != nil {
		return err
	}
	s.run.proxy.SetPolicy(compiled)
	s.mu.Lock()
	s.spec.Network = p
	s.mu.Unlock()
	return nil
}

// Terminate kills every process of the sandbox and removes its cgroup;
// nothing is left. It is idempotent.
func (s *Sandbox) Terminate(ctx context.Context) error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	s.done = true
	suspended := s.suspended
	s.mu.Unlock()
	s.run.stop()
	if suspended {
		// On cgroup v1 a frozen process dies of SIGKILL only once thawed.
		_ = s.run.cg.Thaw(ctx)
	}
	err := s.run.teardown(ctx)
	close(s.ended)
	return err
}

// checkRunning, with s.mu held, refuses an operation (doing) on a
// terminated or suspended sandbox.
func (s *Sandbox) checkRunning(doing string) error {
	switch {
	case s.done:
		return ErrTerminated
	case s.suspended:
		return fmt.Errorf("%w: resume it before %s", ErrSuspended, doing)
	}
	return nil
}

// Suspend freezes every process of the sandbox (cgroup freezer: no CPU,
// memory kept) and waits until the kernel reports them frozen. Exec is
// refused with ErrSuspended until Resume. It needs a cgroup (root, or a
// delegated cgroup v2 subtree); without one it fails with ErrUnsupported.
func (s *Sandbox) Suspend(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done:
		return ErrTerminated
	case s.suspended:
		return nil
	case s.run.cg == nil:
		return fmt.Errorf("%w: suspending needs a cgroup freezer, and this sandbox has no cgroup (run as root or under a delegated cgroup v2 subtree)", ErrUnsupported)
	}
	if err := s.run.cg.Freeze(ctx); err != nil {
		_ = s.run.cg.Thaw(context.Background())
		return fmt.Errorf("suspending: %w", err)
	}
	s.suspended = true
	return nil
}

// Resume thaws a suspended sandbox.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done:
		return ErrTerminated
	case !s.suspended:
		return nil
	}
	if err := s.run.cg.Thaw(ctx); err != nil {
		return fmt.Errorf("resuming: %w", err)
	}
	s.suspended = false
	return nil
}

// NetworkDenied lists the destinations the network policy has refused
// so far (limited mode), with counts.
func (s *Sandbox) NetworkDenied() []netpolicy.Denial {
	if s.run.proxy == nil {
		return nil
	}
	return s.run.proxy.Denied()
}

// Done is closed once the sandbox has been terminated (by Terminate or
// when Limits.Timeout ran out).
func (s *Sandbox) Done() <-chan struct{} { return s.ended }

// execUser is the identity a command of p runs as: req.User when set
// (checked against the sandbox's id range), else the sandbox user's
// (def) with its groups; with req's capabilities when it gives any, else
// the sandbox's. nil means the init's own ids, with no group and no
// capability (the kept exec thread's).
func execUser(p *plan, def *User, req ExecRequest) (*namespaces.Creds, error) {
	if req.AsRoot && (req.User != nil || len(req.Capabilities) > 0 || len(req.AmbientCapabilities) > 0) {
		return nil, fmt.Errorf("%w: exec: User or Capabilities with AsRoot: a command runs as one of them", ErrInvalidSpec)
	}
	c := namespaces.Creds{UID: p.uid, GID: p.gid, Caps: p.caps, Ambient: p.ambient}
	if def != nil {
		c.Groups = def.Groups
	}
	if req.Capabilities != nil || req.AmbientCapabilities != nil {
		var err error
		if c.Caps, c.Ambient, err = capabilityMasks(req.Capabilities, req.AmbientCapabilities, "exec: "); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
	}
	if u := req.User; u != nil {
		if p.idRange == nil && (u.UID != p.uid || u.GID != p.gid) {
			return nil, fmt.Errorf("%w: exec: user %d:%d: the sandbox maps one id, its user's (%d:%d); another user needs id_range", ErrInvalidSpec, u.UID, u.GID, p.uid, p.gid)
		}
		if err := validateIDs(p.idRange, u, "exec: user"); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
		c.UID, c.GID, c.Groups = u.UID, u.GID, u.Groups
	}
	if c.UID == p.uid && c.GID == p.gid && len(c.Groups) == 0 && c.Caps == 0 {
		return nil, nil // the init's own ids, no group, no capability: the kept thread's
	}
	return &c, nil
}

// OwnedByCaller reports whether the namespace f (an open /proc/PID/ns/*
// file) is owned by this process's user namespace: for a root caller,
// the host's own namespaces, or ones no container made. A frontend that
// joins a pod's namespace (tent-runc's ipc and pid paths) refuses those;
// [ProvisionOptions].PIDNamespace is checked so as well.
func OwnedByCaller(f *os.File) (bool, error) { return namespaces.OwnedByCaller(f) }
