package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	if err := rp.usePrivateDir(&c.Spec, d); err != nil {
		return err
	}
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
	if err := d.launch(rp, r.cg); err != nil {
		return err
	}
	kill := func() { d.kill(r) }
	if t := c.Spec.Limits.Timeout; t > 0 {
		timer := time.AfterFunc(t, func() { close(r.timedOut); kill() })
		stopCtx := context.AfterFunc(ctx, kill)
		r.stop = func() bool { a := timer.Stop(); b := stopCtx(); return a && b }
	} else {
		r.stop = context.AfterFunc(ctx, kill)
	}
	log.Debug("reduced tier: command started", "pid", d.pid, "elapsed", time.Since(start), "why", why)
	c.run = r
	started := p.report
	c.Report = &started
	return nil
}

// usePrivateDir creates the command's private TMPDIR and HOME (d.tmp),
// which only its Landlock domain may reach, and sets the command's
// environment and, when s names none, directory.
func (rp *reducedPlan) usePrivateDir(s *Spec, d *directRun) (err error) {
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
	for _, sec := range s.Network.Secrets {
		private = append(private, sec.Name+"="+netpolicy.NewPlaceholder())
	}
	rp.direct.Exec.Env = buildEnv(s.EnvInherit, private, s.Env, d.tmp, rp.user, os.Environ(), secretValues(s.Network.Secrets))
	if rp.direct.Exec.Dir == "" {
		rp.direct.Exec.Dir = d.tmp
	}
	rp.direct.Creds = rp.creds
	return nil
}

// launch starts the command of rp (d.pid) and a goroutine that reaps it
// (d.exited). With a cgroup cg the command, still tent's trampoline,
// waits on a gate until it is placed in cg.
func (d *directRun) launch(rp *reducedPlan, cg *cgroups.Cgroup) error {
	var gateW *os.File
	if cg != nil {
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
		if err := cg.AddProc(pid); err != nil {
			return fmt.Errorf("placing the command in its cgroup: %w", err)
		}
		if _, err := gateW.Write([]byte{1}); err != nil {
			return fmt.Errorf("releasing the command: %w", err)
		}
	}
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
