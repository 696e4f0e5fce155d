package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
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
	direct   *directRun    // reduced tier: no init (see reduced_run_linux.go)
	// ctxKilled is closed when the Cmd's context killed the sandbox.
	ctxKilled chan struct{}
	// stdio and tty are a one-shot command's stdio and terminal relay.
	stdio *stdio
	tty   *ttyRelay
	// exitStatus, for an init its caller's parent reaps
	// (ProvisionOptions.ParentReaps), is the status it quits with.
	exitStatus func() int
}

// quitGrace bounds the wait for an init told to quit (Init.Quit) before
// it is killed.
const quitGrace = 5 * time.Second

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
	if _, err := inlineSecrets(c.Spec.Network.Secrets, nil); err != nil {
		return err // a one-shot command's values are given inline
	}
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
		if r.exitStatus != nil {
			_ = r.init.Quit(r.exitStatus(), quitGrace)
		} else {
			_ = r.init.Kill()
		}
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
