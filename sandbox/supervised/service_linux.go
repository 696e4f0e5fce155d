package supervised

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/tent-sandbox/tent/sandbox"
)

// The service's restart backoff: the first restart after serviceBackoffMin,
// each quick death doubling it up to serviceBackoffMax; a run of
// serviceStableAfter resets it.
const (
	serviceBackoffMin  = 100 * time.Millisecond
	serviceBackoffMax  = 5 * time.Second
	serviceStableAfter = 10 * time.Second
	// servicePoll is how often readiness is checked.
	servicePoll = 100 * time.Millisecond
	// serviceTag tags the service in the process table.
	serviceTag = "service"
	// serviceTailLines and serviceTailBytes bound the output an error
	// quotes, per stream.
	serviceTailLines = 20
	serviceTailBytes = 2048
)

// startService starts sb's service and waits until it is ready (see
// sandbox.Service): within its bound, or the error names the check,
// matches [ErrServiceNotReady] and quotes the end of the service's
// output, the service killed. A sandbox without a service returns nil.
func startService(ctx context.Context, sb *sandbox.Sandbox) (sandbox.Process, error) {
	svc := sb.Info().Spec.Service
	if svc == nil {
		return nil, nil
	}
	p, err := spawnService(ctx, sb, svc)
	if err != nil {
		return nil, fmt.Errorf("%w: starting %q: %w", ErrServiceNotReady, svc.Command, err)
	}
	rctx, cancel := context.WithTimeout(ctx, svc.ReadyBound())
	defer cancel()
	if err := waitReady(rctx, sb, svc, p); err != nil {
		_ = p.Signal(context.Background(), syscall.SIGKILL)
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = p.Wait(wctx)
		wcancel()
		return nil, fmt.Errorf("%w: %q: %w%s", ErrServiceNotReady, svc.Command, err, outputTail(p))
	}
	return p, nil
}

func spawnService(ctx context.Context, sb *sandbox.Sandbox, svc *sandbox.Service) (sandbox.Process, error) {
	return sb.StartProcess(ctx, sandbox.ExecRequest{Args: svc.Command, Env: svc.Env, Dir: svc.Workdir}, sandbox.StartOptions{Tag: serviceTag})
}

// waitReady polls svc's checks until they pass, p exits, or ctx ends.
func waitReady(ctx context.Context, sb *sandbox.Sandbox, svc *sandbox.Service, p sandbox.Process) error {
	exited := make(chan *sandbox.ExecResult, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		if res, err := p.Wait(wctx); err == nil {
			exited <- res
		}
	}()
	t := time.NewTicker(servicePoll)
	defer t.Stop()
	var last error
	for {
		err := checkReady(ctx, sb, svc)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err // not a check that ctx's end cut short
		}
		select {
		case res := <-exited:
			return fmt.Errorf("it exited (%s) before it was ready", exitText(res))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not ready after %s: %w", svc.ReadyBound(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// checkReady runs svc's checks once: nil when they pass, else what
// failed, naming the check.
func checkReady(ctx context.Context, sb *sandbox.Sandbox, svc *sandbox.Service) error {
	if svc.ReadyPort > 0 {
		conn, err := sb.DialPort(ctx, svc.ReadyPort)
		if errors.Is(err, sandbox.ErrUnsupported) {
			// No network namespace of its own: its ports are the host's.
			var d net.Dialer
			conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(svc.ReadyPort)))
		}
		if err != nil {
			return fmt.Errorf("ready_port %d accepts no connection (%v)", svc.ReadyPort, err)
		}
		conn.Close()
	}
	if len(svc.ReadyCommand) > 0 {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: svc.ReadyCommand, Env: svc.Env, Dir: svc.Workdir, Stdout: io.Discard, Stderr: io.Discard})
		switch {
		case err != nil:
			return fmt.Errorf("ready_command %q: %v", svc.ReadyCommand, err)
		case res.ExitCode != 0 || res.Signal != "":
			return fmt.Errorf("ready_command %q %s", svc.ReadyCommand, exitText(res))
		}
	}
	return nil
}

func exitText(res *sandbox.ExecResult) string {
	if res.Signal != "" {
		return "killed by " + res.Signal
	}
	return "status " + strconv.Itoa(res.ExitCode)
}

// outputTail quotes the end of p's stdout and stderr (the last
// serviceTailLines lines of each, control characters replaced: the
// sandbox wrote them) as a suffix for an error.
func outputTail(p sandbox.Process) string {
	done, cancel := context.WithCancel(context.Background())
	cancel() // what is there now, no waiting
	var b strings.Builder
	for fd, name := range []string{1: "stdout", 2: "stderr"} {
		if name == "" {
			continue
		}
		tail := streamTail(done, p, fd)
		if tail == "" {
			continue
		}
		fmt.Fprintf(&b, "\nits %s ends:\n%s", name, tail)
	}
	if b.Len() == 0 {
		return " (it wrote no output)"
	}
	return b.String()
}

func streamTail(ctx context.Context, p sandbox.Process, fd int) string {
	var tail []byte
	off := int64(0)
	for range 1024 { // the ring holds at most 1 MiB
		out, err := p.ReadOutput(ctx, fd, off)
		if err != nil {
			break
		}
		tail = append(tail, out.Data...)
		if len(tail) > serviceTailBytes {
			tail = tail[len(tail)-serviceTailBytes:]
		}
		off = out.Offset + int64(len(out.Data))
		if out.End || len(out.Data) == 0 {
			break
		}
	}
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, strings.TrimRight(string(tail), "\n"))
	lines := strings.Split(s, "\n")
	if len(lines) > serviceTailLines {
		lines = lines[len(lines)-serviceTailLines:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// keepService keeps sb's service running until ctx ends: it waits for
// the running one (first; nil: none yet) to exit, and starts it again
// after the backoff, logging its restarts (see loggedRestart). It does not wait for
// readiness: nobody waits for it then.
func keepService(ctx context.Context, sb *sandbox.Sandbox, first sandbox.Process, log *slog.Logger) {
	svc := sb.Info().Spec.Service
	if svc == nil {
		return
	}
	p, delay, restarts := first, serviceBackoffMin, 0
	for ctx.Err() == nil {
		if p != nil {
			started := time.Now()
			res, err := p.Wait(ctx)
			if err != nil { // ctx ended, or the sandbox did
				return
			}
			if time.Since(started) >= serviceStableAfter {
				delay = serviceBackoffMin
			}
			restarts++
			if loggedRestart(restarts) {
				log.Warn("the sandbox's service exited: restarting it", "command", svc.Command, "exit", exitText(res), "in", delay, "restarts", restarts)
			}
			if !sleepCtx(ctx, delay) {
				return
			}
			delay = min(delay*2, serviceBackoffMax)
		}
		var err error
		if p, err = spawnService(ctx, sb, svc); err != nil {
			if ctx.Err() != nil || errors.Is(err, sandbox.ErrTerminated) {
				return
			}
			log.Warn("the sandbox's service did not start again", "command", svc.Command, "err", err, "retry in", delay)
			if !sleepCtx(ctx, delay) {
				return
			}
			delay = min(delay*2, serviceBackoffMax)
		}
	}
}

// loggedRestart reports whether restart n is logged: the first ten,
// then every hundredth, so that a service that keeps dying (at most one
// restart in serviceBackoffMax) does not grow the sandbox's log without
// bound; each line says how many restarts there were.
func loggedRestart(n int) bool { return n <= 10 || n%100 == 0 }

// sleepCtx sleeps d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// logger is o's logger, or one that discards.
func (o launch) logger() *slog.Logger {
	if o.log != nil {
		return o.log
	}
	return slog.New(slog.DiscardHandler)
}
