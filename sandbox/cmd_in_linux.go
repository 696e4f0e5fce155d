package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// The commands of Sandbox.Command: a Cmd over Sandbox.Start and its
// Job, which leave the sandbox running.

// startIn starts c in its long-lived sandbox; c.mu is held.
func (c *Cmd) startIn() error {
	if c.proc != nil {
		return errors.New("sandbox: already started")
	}
	if len(c.Args) == 0 {
		c.Args = []string{c.Path}
	}
	ctx := c.context()
	req := ExecRequest{Args: append([]string{c.Path}, c.Args[1:]...), Env: c.Spec.Env, Dir: c.Spec.Workdir,
		Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr, TTY: c.TTY}
	if req.Stdout == nil {
		req.Stdout = io.Discard
	}
	if req.Stderr == nil && req.TTY == nil {
		req.Stderr = io.Discard
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// ctx's end is ours to act on (Cancel, WaitDelay), not Start's.
	p, err := c.sb.Start(context.WithoutCancel(ctx), req)
	if err != nil {
		return err
	}
	c.proc = p
	c.stopCancel = context.AfterFunc(ctx, func() {
		cancel := c.Cancel
		if cancel == nil {
			cancel = p.Kill
		}
		_ = cancel()
		if c.WaitDelay > 0 {
			c.mu.Lock()
			c.delay = time.AfterFunc(c.WaitDelay, func() { _ = p.Kill() })
			c.mu.Unlock()
		}
	})
	return nil
}

// waitIn waits for c's command: its result becomes c.Report (its exit,
// wall time and the network's refusals), a non-zero exit an *ExitError.
func (c *Cmd) waitIn(p *Job) error {
	res, err := p.Wait()
	c.mu.Lock()
	if c.stopCancel != nil {
		c.stopCancel()
	}
	if c.delay != nil {
		c.delay.Stop()
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.Report = &Report{Exit: res.Exit, WallTime: res.Duration, NetworkDenied: res.NetworkDenied}
	if cerr := c.context().Err(); cerr != nil && res.ExitCode != 0 {
		return &ExitError{Report: c.Report, ctxErr: cerr}
	}
	if res.ExitCode != 0 {
		return &ExitError{Report: c.Report}
	}
	return nil
}
