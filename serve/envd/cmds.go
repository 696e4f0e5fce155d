package envd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// callTimeout bounds one call on a command (a signal, a listing) where
// no request bounds it.
const callTimeout = 30 * time.Second

// processes lists the sandbox's commands and forgets what the box kept
// of those whose records the sandbox no longer keeps.
func (bx *box) processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	seq := bx.seq // those recorded later may be missing from the listing
	bx.mu.Unlock()
	infos, err := hd.Processes(ctx)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	for pid, c := range bx.cmds {
		if c.seq <= seq && !slices.ContainsFunc(infos, func(pi sandbox.ProcessInfo) bool { return pi.Pid == pid }) {
			delete(bx.cmds, pid)
		}
	}
	return infos, nil
}

// cmdFor returns what the box keeps of the command pi describes, taking
// it up when the box did not start it.
func (bx *box) cmdFor(pi sandbox.ProcessInfo) *cmd {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	c := bx.cmds[pi.Pid]
	if c == nil {
		c = cmdOf(pi)
		if !bx.closed {
			bx.recordLocked(c)
		}
	}
	return c
}

// lookup finds the command sel names, and its Process; ended ones only
// with ended, and never one whose end a client was sent.
func (bx *box) lookup(ctx context.Context, sel *processpb.ProcessSelector, ended bool) (*cmd, sandbox.Process, error) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return nil, nil, rpcError(err)
	}
	var pi *sandbox.ProcessInfo
	var what string
	switch s := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		what = fmt.Sprintf("pid %d", s.Pid)
		bx.mu.Lock()
		c := bx.cmds[int(s.Pid)]
		bx.mu.Unlock()
		if c != nil {
			// An operation on one that has ended fails (ErrNoProcess).
			return bx.known(ctx, hd, c, what)
		}
		infos, err := bx.processes(ctx)
		if err != nil {
			return nil, nil, rpcError(err)
		}
		if i := slices.IndexFunc(infos, func(pi sandbox.ProcessInfo) bool { return pi.Pid == int(s.Pid) }); i >= 0 {
			pi = &infos[i]
		}
	case *processpb.ProcessSelector_Tag:
		what = fmt.Sprintf("tag %q", s.Tag)
		infos, err := bx.processes(ctx)
		if err != nil {
			return nil, nil, rpcError(err)
		}
		for i := range infos {
			if infos[i].Tag == s.Tag && !bx.collected(infos[i].Pid) {
				pi = &infos[i] // the latest
			}
		}
	default:
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no process selected: give a pid or a tag"))
	}
	if pi == nil || (!ended && !pi.Running) {
		return nil, nil, errNotFound(what)
	}
	return bx.known(ctx, hd, bx.cmdFor(*pi), what)
}

// known returns c with its Process, unless a client was sent its end.
func (bx *box) known(ctx context.Context, hd sandbox.Handle, c *cmd, what string) (*cmd, sandbox.Process, error) {
	if bx.collected(c.pid) {
		return nil, nil, errNotFound(what)
	}
	p, err := hd.Process(ctx, c.pid)
	if errors.Is(err, sandbox.ErrNoProcess) {
		return nil, nil, errNotFound(what)
	}
	if err != nil {
		return nil, nil, rpcError(err)
	}
	return c, p, nil
}

// collected reports whether a client was sent the end of command pid.
func (bx *box) collected(pid int) bool {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	c := bx.cmds[pid]
	return c != nil && c.collected
}

// start starts req in the box's sandbox within the handler's bounds
// (Options.MaxProcesses, one running command per tag). A command of
// /bin/bash, as the SDKs send, runs /bin/sh with the same arguments where
// the sandbox has no bash; while the sandbox is paused, it waits until it
// runs again (or ctx ends) and then starts.
func (bx *box) start(ctx context.Context, req sandbox.ExecRequest, o sandbox.StartOptions) (sandbox.Process, error) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return nil, err
	}
	for {
		p, err := bx.startOnce(ctx, hd, req, o)
		switch {
		case errors.Is(err, sandbox.ErrSuspended):
			bx.h.log.Debug("waiting for the sandbox to be resumed to start a command", "sandbox", bx.id)
			if !bx.waitRunning(ctx) {
				return nil, err
			}
		case errors.Is(err, sandbox.ErrCommandNotFound) && req.Args[0] == "/bin/bash":
			req.Args = append([]string{"/bin/sh"}, req.Args[1:]...)
		default:
			return p, err
		}
	}
}

// startOnce starts req, refusing it beyond the handler's bounds.
func (bx *box) startOnce(ctx context.Context, hd sandbox.Handle, req sandbox.ExecRequest, o sandbox.StartOptions) (sandbox.Process, error) {
	bx.startMu.Lock()
	defer bx.startMu.Unlock()
	infos, err := bx.processes(ctx)
	if err != nil {
		return nil, err
	}
	running := 0
	for _, pi := range infos {
		if !pi.Running {
			continue
		}
		running++
		if o.Tag != "" && pi.Tag == o.Tag {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("process %d runs with tag %q", pi.Pid, o.Tag))
		}
	}
	if running >= bx.h.opts.MaxProcesses {
		return nil, errResourceExhausted(fmt.Sprintf("the sandbox runs %d processes, its limit", running))
	}
	return hd.Start(ctx, req, o)
}

// add records c, a command the handler started.
func (bx *box) add(c *cmd) error {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.closed {
		return errGone()
	}
	bx.recordLocked(c)
	return nil
}

// recordLocked records c in the box; bx.mu is held.
func (bx *box) recordLocked(c *cmd) {
	bx.seq++
	c.seq = bx.seq
	bx.cmds[c.pid] = c
}

// killAll kills the sandbox's commands pids and waits a while for their
// end (Forget: the sandbox is being killed).
func killAll(hd sandbox.Handle, pids []int) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var procs []sandbox.Process
	for _, pid := range pids {
		if p, err := hd.Process(ctx, pid); err == nil && p.Signal(ctx, syscall.SIGKILL) == nil {
			procs = append(procs, p)
		}
	}
	for _, p := range procs {
		_, _ = p.Wait(ctx)
	}
}
