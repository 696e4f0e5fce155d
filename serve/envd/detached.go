package envd

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// Commands the supervisor owns. Over a backend whose sandboxes each have
// a supervisor (package supervised's, what tent serve uses), a command
// started without stdin and without a terminal — the SDKs' default, and
// how background commands are started — is started detached: the
// supervisor owns it, with its real pid inside the sandbox, and the
// handler only follows its output (Backend.Attach). It therefore
// outlives the server: after tent serve --keep-sandboxes is restarted,
// the new handler takes up the sandbox's detached commands on its first
// request for the sandbox (commands.list lists them; commands.connect
// gets the output no earlier reader got, then the exit). Commands with
// stdin or a terminal, and any that the supervisor cannot take (its
// table full), run as before: for the life of the handler. Handler
// processes that are not the supervisor's get pids above the kernel's
// highest (2^22), so that the two never collide.

// detacher is a sandbox whose supervisor can own commands (package
// supervised's handle).
type detacher interface {
	ExecDetached(ctx context.Context, req sandbox.ExecRequest, o supervised.DetachOptions) (int, error)
	Processes(ctx context.Context) ([]supervised.ProcessInfo, error)
	SignalProcess(ctx context.Context, pid int, sig syscall.Signal) error
	Attach(ctx context.Context, pid int, stdout, stderr io.Writer, signals <-chan os.Signal) (*sandbox.ExecResult, error)
}

// detacher returns the box's sandbox as a detacher, when it is one.
func (bx *box) detacher(ctx context.Context) (detacher, bool) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return nil, false
	}
	det, ok := hd.(detacher)
	return det, ok
}

// firstHandlerPID is the pid before the first one the handler gives its
// own processes: above any pid the kernel gives (PID_MAX_LIMIT).
const firstHandlerPID = 1 << 22

// supervisorCallTimeout bounds one call to a supervisor.
const supervisorCallTimeout = 30 * time.Second

// startDetached starts req detached, retrying with /bin/sh where the
// sandbox has no bash (as run does); it returns the command's pid.
func (bx *box) startDetached(ctx context.Context, det detacher, req sandbox.ExecRequest, tag string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, supervisorCallTimeout)
	defer cancel()
	o := supervised.DetachOptions{Tag: tag}
	pid, err := det.ExecDetached(ctx, req, o)
	if errors.Is(err, sandbox.ErrCommandNotFound) && req.Args[0] == "/bin/bash" {
		req.Args = append([]string{"/bin/sh"}, req.Args[1:]...)
		pid, err = det.ExecDetached(ctx, req, o)
	}
	return pid, err
}

// follow attaches to the detached command p and records its end. ctx's
// end (Forget, Close) detaches: the command goes on without this handler.
func (p *proc) followDetached(ctx context.Context) {
	defer p.cancel()
	res, err := p.det.Attach(ctx, int(p.pid), &outWriter{p, kindStdout}, &outWriter{p, kindStderr}, nil)
	detachedFrom := res == nil && ctx.Err() != nil
	lost := errors.Is(err, sandbox.ErrTerminated) // it ended with its sandbox
	if res == nil && errors.Is(err, supervised.ErrNoProcess) {
		// Its record is gone (a supervisor restarted by an idle hand-off
		// keeps none of finished commands).
		err = errors.New("the command's record is gone: its exit is not known")
	}
	end := endEvent(res, err)
	gone := detachedFrom || lost || p.bx.isClosed()
	if !gone && res == nil {
		ectx, cancel := context.WithTimeout(context.Background(), supervisorCallTimeout)
		gone = p.bx.ended(ectx)
		cancel()
	}
	p.bx.h.log.Debug("detached process followed to its end", "sandbox", p.bx.id, "pid", p.pid, "status", end.Status, "detached_from", detachedFrom)
	p.mu.Lock()
	p.end, p.stopped, p.gone = end, true, gone
	p.notify()
	p.mu.Unlock()
	time.AfterFunc(p.bx.h.opts.ExitedRetention, func() { p.bx.removeProc(p) })
}

// adopt takes up, once per box, the detached commands of the sandbox that
// the handler does not know: those a handler before it started (a
// restarted server), and tent exec -d's. It takes the running ones and
// the ended ones with output no reader got.
func (bx *box) adopt(ctx context.Context) {
	det, ok := bx.detacher(ctx)
	if !ok {
		return
	}
	bx.adoptOnce.Do(func() {
		cctx, cancel := context.WithTimeout(ctx, supervisorCallTimeout)
		infos, err := det.Processes(cctx)
		cancel()
		if err != nil {
			bx.h.log.Debug("listing the supervisor's commands", "sandbox", bx.id, "err", err)
			return
		}
		for _, pi := range infos {
			if (!pi.Running && pi.Unread == 0) || len(pi.Args) == 0 || pi.Pid <= 0 || pi.Pid > firstHandlerPID {
				continue
			}
			cfg := &processpb.ProcessConfig{Cmd: pi.Args[0], Args: pi.Args[1:]}
			if pi.Dir != "" {
				cfg.Cwd = &pi.Dir
			}
			var tag *string
			if pi.Tag != "" {
				tag = &pi.Tag
			}
			p := newProc(bx, cfg, tag, false)
			p.det = det
			pctx, pcancel := context.WithCancel(context.Background())
			p.cancel = pcancel
			if err := bx.addProcPID(p, uint32(pi.Pid)); err != nil {
				pcancel()
				continue
			}
			go p.followDetached(pctx)
			bx.h.log.Debug("took up a detached process", "sandbox", bx.id, "pid", pi.Pid, "running", pi.Running)
		}
	})
}
