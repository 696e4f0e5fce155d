package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

var (
	// ErrTerminated is returned by the methods of a terminated [Sandbox].
	ErrTerminated = errors.New("sandbox terminated")
	// ErrSuspended is returned by Exec on a suspended [Sandbox].
	ErrSuspended = errors.New("sandbox suspended")
)

// ProvisionOptions are the host-side settings of a long-lived sandbox.
type ProvisionOptions struct {
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// NetLog receives the network audit log in limited mode.
	NetLog io.Writer
	// ID names the sandbox in the network audit log's records (their
	// "sandbox" field); "" means a random one. tent create uses the
	// sandbox's id.
	ID string
	// ProxyLimits bound what the sandbox can make its network proxy
	// spend in limited mode; the zero value is the defaults.
	ProxyLimits ProxyLimits
	// Resolver resolves the names the network policy allows; nil means
	// the host's resolver.
	Resolver netpolicy.Resolver
	// IdleAfter is how long the sandbox may sit with no request and no
	// command running before its init, a Go process of several MiB, gives
	// way to a small idle holder (under 1 MiB resident) that brings the
	// init back at the next request: that request then pays the Go
	// runtime's start-up, about 10 ms on a 2-vCPU VM. 0 means
	// [DefaultIdleAfter]; a negative value keeps the init for good (it
	// still trims its memory after a few idle seconds). Binaries built
	// without cgo have no holder.
	IdleAfter time.Duration
}

// DefaultIdleAfter is the default [ProvisionOptions.IdleAfter].
const DefaultIdleAfter = namespaces.DefaultIdleAfter

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
	r, err := boot(ctx, &spec, "", nil, bootIO{netLog: opts.NetLog, resolver: opts.Resolver, log: log, prefill: prefill, idleAfter: opts.IdleAfter, id: id, proxyLimits: opts.ProxyLimits})
	if err != nil {
		return nil, err
	}
	go r.init.Serve()
	s := &Sandbox{id: id, spec: spec, run: r, ended: make(chan struct{})}
	r.stop = func() bool { return true }
	if t := spec.Limits.Timeout; t > 0 {
		s.deadline = time.Now().Add(t)
		timer := time.AfterFunc(t, func() { _ = s.Terminate(context.Background()) })
		r.stop = timer.Stop
	}
	return s, nil
}

// ID is the sandbox's id: [ProvisionOptions.ID], or 16 random hex
// digits. It names the sandbox's cgroup and its records.
func (s *Sandbox) ID() string { return s.id }

// Usage reads what the sandbox uses now from its cgroups; a sandbox
// without a cgroup (an unprivileged caller without delegation) fails with
// [ErrUnsupported].
func (s *Sandbox) Usage() (Usage, error) {
	dirs := s.CgroupPaths()
	if len(dirs) == 0 {
		return Usage{}, fmt.Errorf("%w: sandbox %s has no cgroup to read its usage from (see tent doctor)", ErrUnsupported, s.id)
	}
	return cgroups.ReadUsage(dirs), nil
}

// CgroupPaths are the sandbox's cgroup directories (none without a
// cgroup); Terminate removes them.
func (s *Sandbox) CgroupPaths() []string {
	return append([]string(nil), s.run.plan.report.CgroupPaths...)
}

// InitPID is the host pid of the sandbox's init (PID 1 inside).
func (s *Sandbox) InitPID() int { return s.run.init.Pid() }

// Spec returns the spec the sandbox was provisioned with.
func (s *Sandbox) Spec() Spec { return s.spec }

// Protections reports how each protection is provided.
func (s *Sandbox) Protections() []Protection {
	return append([]Protection(nil), s.run.plan.report.Protections...)
}

// ExecRequest is one command to run in a [Sandbox].
type ExecRequest struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH
	// inside the sandbox unless it contains a slash.
	Args []string
	// Dir is the working directory inside; "" means the sandbox's.
	Dir string
	// Env is layered over the sandbox's environment, later wins.
	Env []string
	// Stdin is the command's fd 0: an *os.File is passed as is, another
	// reader is copied through a pipe; nil means /dev/null.
	Stdin io.Reader
	// Stdout and Stderr are the command's fds 1 and 2, streamed as the
	// command writes (never buffered until it exits):
	//
	//   - nil: captured into ExecResult.Stdout or ExecResult.Stderr, up
	//     to MaxOutput bytes (DefaultMaxOutput when MaxOutput is 0);
	//   - [io.Discard]: /dev/null, nothing is copied;
	//   - an *os.File: passed as is, with no copy, unless MaxOutput is
	//     positive (the output is then counted through a pipe, so the
	//     command no longer sees a terminal);
	//   - another writer: copied through a pipe as the command writes.
	//
	// When Stdout and Stderr are the same writer, fds 1 and 2 share one
	// pipe, as with os/exec: the order of the command's writes is kept,
	// the writer is never called concurrently, MaxOutput caps the
	// combined stream and both truncation flags report it. A writer that
	// fails is dropped and the rest of its output discarded. Output that
	// a background process writes after the command exited is cut off
	// after a short grace.
	//
	// A file the sandbox's user could not reopen by path (/dev/stdout,
	// /proc/self/fd/N), such as a root caller's pipe or a socket, is
	// relayed through a pipe that user owns (see "How the command's
	// stdio can be reopened" in the package doc).
	Stdout, Stderr io.Writer
	// TTY, when set, runs the command on a new terminal inside the
	// sandbox (see [Terminal]): Stdin is copied into it, its output goes
	// to Stdout under the rules above (nil: captured), Stderr is unused.
	TTY *Terminal
	// Signals, when not nil, is read while the command runs: each
	// syscall.Signal received is delivered to the command's foreground
	// process group, as [Cmd.Signal] does.
	Signals <-chan os.Signal
	// Timeout, when positive, kills the command (and its process group)
	// after that long; the result says TimedOut.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr, in bytes. Past the cap
	// the rest is read and dropped — the command never blocks on a full
	// pipe and keeps running — and ExecResult.StdoutTruncated or
	// StderrTruncated is set. 0 means DefaultMaxOutput for captured
	// output (a nil Stdout or Stderr) and no cap for the caller's own
	// writers and files; a negative value is refused (ErrInvalidSpec).
	MaxOutput int64
}

// ExecResult is how a command ended, and its captured output.
type ExecResult struct {
	// Exit is how it ended. OOMKilled is set when the count of OOM kills
	// in the sandbox's cgroup rose while the command ran (and it was not
	// killed for ctx): the memory limit killed the command or one of its
	// descendants — give or take a concurrent exec's process killed at
	// the same moment.
	Exit
	Duration time.Duration `json:"duration_ns"`
	// Stdout and Stderr are the captured output when the request's
	// Stdout or Stderr was nil (at most MaxOutput bytes each); nil when
	// it was streamed to a writer or file. Encoded in base64 in JSON.
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	// StdoutTruncated and StderrTruncated report that the command wrote
	// more than MaxOutput bytes to that stream and the rest was dropped.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// NetworkDenied lists the connections the network policy refused
	// while the command ran (limited mode; give or take a concurrent
	// command's), for a summary such as netpolicy.Summary.
	NetworkDenied []netpolicy.Denial `json:"network_denied,omitempty"`
}

// NetworkSummary summarises the connections the network policy refused
// while the command ran ("" for none), one line per destination.
func (r *ExecResult) NetworkSummary() string { return netpolicy.Summary(r.NetworkDenied) }

// Exec runs one command and waits for it. Cancelling ctx kills it. A
// command that cannot start returns an error (ErrCommandNotFound,
// ErrNotExecutable, ...); a command that ran returns its result, whatever
// its exit code.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	before := s.NetworkDenied()
	res, err := s.exec(ctx, req, false)
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
	s.mu.Lock()
	if err := s.checkRunning("running commands"); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.nextExec++
	id := strconv.Itoa(s.nextExec)
	s.mu.Unlock()

	base := s.run.plan.cfg.Exec
	e := namespaces.Exec{Path: req.Args[0], Args: req.Args, Env: mergeEnv(append(append([]string{}, base.Env...), req.Env...)), Dir: base.Dir, FileHelper: helper}
	if req.Dir != "" {
		e.Dir = req.Dir
	}
	var sio *stdio
	var err error
	if req.TTY != nil {
		sz := req.TTY.size()
		e.TTY = &namespaces.WindowSize{Rows: sz.Rows, Cols: sz.Cols}
		sio = &stdio{} // nothing of the caller's is passed in
	} else if sio, err = openStdioFor(req.Stdin, req.Stdout, req.Stderr, req.MaxOutput, stdioOwner(s.run.plan)); err != nil {
		return nil, err
	}
	defer sio.close()
	oomBefore := s.run.oomKills()
	start := time.Now()
	_, master, exited, err := s.run.init.Exec(id, e, sio.fds)
	sio.closeChildEnds()
	if err != nil {
		if errors.Is(err, namespaces.ErrInitGone) {
			return nil, fmt.Errorf("%w: %w", ErrTerminated, err)
		}
		return nil, startError(err)
	}
	var tty *ttyRelay
	if master != nil {
		if tty, err = startTTY(master, req.TTY, req.Stdin, req.Stdout, true, req.MaxOutput); err != nil {
			_ = s.run.init.KillExec(id)
			<-exited
			return nil, err
		}
	}
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := &ExecResult{}
	var ex namespaces.ExecExit
	for waiting := true; waiting; {
		select {
		case ex = <-exited:
			waiting = false
		case sig := <-req.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = s.run.init.SignalExec(id, ss)
			}
		case <-timeout:
			res.TimedOut = true
			_ = s.run.init.KillExec(id)
			ex = <-exited
			waiting = false
		case <-ctx.Done():
			_ = s.run.init.KillExec(id)
			ex = <-exited
			waiting = false
		}
	}
	res.Duration = time.Since(start)
	if tty != nil {
		tty.wait(250 * time.Millisecond)
		if tty.sink != nil {
			res.StdoutTruncated = tty.sink.truncated
			if tty.sink.buf != nil {
				res.Stdout = tty.sink.buf.Bytes()
			}
		}
	}
	sio.wait(250 * time.Millisecond)
	if ex.Err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTerminated, ex.Err)
	}
	sio.fill(res)
	res.setStatus(ex.Status)
	// A kill for ctx is ours, not the OOM killer's.
	res.OOMKilled = ctx.Err() == nil && !res.TimedOut && s.run.oomKills() > oomBefore
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
	if err := s.run.setNetworkPolicy(p); err != nil {
		return err
	}
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

// Suspended reports whether the sandbox is suspended.
func (s *Sandbox) Suspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended
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
