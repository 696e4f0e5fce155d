package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// The supervisor is `tent __supervise ID`, started by `tent create` in
// its own session, with its create flags as a JSON array of strings on fd
// 4 (never on the command line, where every user could read --env
// values). It provisions the sandbox, serves it (sandbox.Supervise) and
// writes "ok" — or "error CODE MESSAGE", the message possibly running
// over several lines — to fd 3 once the sandbox is ready. It lives until `tent rm`, SIGTERM, or the
// end of the sandbox's --timeout. If `tent create` is gone when the
// sandbox is ready (killed: the "ok" meets a closed pipe), nobody has
// the sandbox's id, so the supervisor ends it and removes its record and
// log rather than leave an orphan running.
const superviseCmd = "__supervise"

func newSuperviseCmd(g *globalOptions) *cobra.Command {
	o := &createOptions{}
	c := &cobra.Command{
		Use:    superviseCmd + " ID",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return o.supervise(c, g, args[0])
		},
	}
	o.register(c.Flags())
	c.Flags().StringVar(&o.fromSnapshot, "from-snapshot", "", "fork from the snapshot in `DIR`")
	return c
}

// superviseResumeCmd is the supervisor again, exec'd by its idle holder
// (see sandbox.SuperviseOptions): `tent __supervise-resume [flags] ID
// STATEFD REASON`.
const superviseResumeCmd = "__supervise-resume"

// resumeSignals receives, in a resumed supervisor, the signals that end
// supervision.
var resumeSignals chan os.Signal

func init() {
	if len(os.Args) > 1 && os.Args[1] == superviseResumeCmd {
		// The supervisor's goroutine must stay on the thread that started
		// the sandbox's init (the init dies with that thread; see
		// namespaces.ExecSupervisorHolder). A resumed supervisor's init is
		// a child of the main thread, where main runs when locked from
		// init.
		runtime.LockOSThread()
		// Until a Go program asks for SIGTERM, the runtime dies of it,
		// which here would kill the sandbox (its init dies with this
		// process) and leave its record and cgroup behind. The holder
		// woken by something else may have exec'd this process just
		// before a SIGTERM: ask for it as early as main's package can, so
		// that the signal ends the sandbox cleanly instead.
		resumeSignals = notifyEnd()
	}
}

// notifyEnd asks for the signals that end supervision.
func notifyEnd() chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	return ch
}

func newSuperviseResumeCmd(g *globalOptions) *cobra.Command {
	o := &createOptions{}
	c := &cobra.Command{
		Use:    superviseResumeCmd + " ID STATEFD REASON",
		Hidden: true,
		Args:   cobra.ExactArgs(3),
		RunE: func(c *cobra.Command, args []string) error {
			log := g.logger()
			if log == nil {
				log = slog.New(slog.DiscardHandler)
			}
			idleAfter, err := parseIdleAfter(o.idleAfter)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			popts := sandbox.ProvisionOptions{Logger: log, IdleAfter: idleAfter}
			if o.netLog != "" {
				f, err := os.OpenFile(o.netLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
				if err != nil {
					log.Debug("reopening the network log", "err", err)
				} else {
					defer f.Close()
					popts.NetLog = f
				}
			}
			if resumeSignals == nil { // started other than by the holder's command line
				resumeSignals = notifyEnd()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-resumeSignals:
					cancel()
				case <-ctx.Done():
				}
			}()
			err = sandbox.ResumeSupervisor(ctx, args[1], args[2], popts, sandbox.SuperviseOptions{
				IdleAfter: idleAfter, ResumeArgs: o.resumeArgs(g, args[0]),
			})
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	o.register(c.Flags())
	return c
}

// resumeArgs is the command line on which the idle holder resumes the
// supervisor of id.
func (o *createOptions) resumeArgs(g *globalOptions, id string) []string {
	args := []string{"tent", superviseResumeCmd, "--state-dir", g.store().Dir}
	if g.verbose {
		args = append(args, "-v")
	}
	if o.netLog != "" {
		args = append(args, "--net-log", o.netLog)
	}
	if o.idleAfter != "" {
		args = append(args, "--idle-after", o.idleAfter)
	}
	return append(args, id)
}

func (o *createOptions) supervise(c *cobra.Command, g *globalOptions, id string) error {
	// The sandbox's init is started from this thread, and an idle
	// supervisor execs its holder from it (see superviseResumeCmd).
	runtime.LockOSThread()
	// Descriptors that tent create's caller leaked to us (without
	// close-on-exec) go no further: not to the idle holder, not on.
	_ = unix.CloseRange(4, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ready := os.NewFile(3, "ready")
	defer ready.Close()
	fail := func(code int, err error) error {
		if _, werr := fmt.Fprintf(ready, "error %d %s\n", code, err); werr != nil {
			// tent create is gone: nobody will read the log.
			_ = os.Remove(strings.TrimSuffix(g.store().SocketPath(id), ".sock") + ".log")
		}
		return &exitError{code: code}
	}
	flags, err := readFlags(os.NewFile(4, "flags"))
	if err != nil {
		return fail(exitRefused, err)
	}
	if err := c.Flags().Parse(flags); err != nil {
		return fail(exitRefused, err)
	}
	cwd, _ := os.Getwd()
	spec, err := buildSpec(c.Flags(), &o.runOptions, os.LookupEnv, cwd, g.logger())
	if err != nil {
		return fail(exitRefused, err)
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return fail(exitRefused, err)
	}
	log := g.logger()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	idleAfter, err := parseIdleAfter(o.idleAfter)
	if err != nil {
		return fail(exitRefused, err)
	}
	opts := sandbox.ProvisionOptions{Logger: log, IdleAfter: idleAfter, ID: id}
	if o.netLog != "" {
		f, err := os.OpenFile(o.netLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fail(exitRefused, fmt.Errorf("--net-log: %w", err))
		}
		defer f.Close()
		opts.NetLog = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	ctx, creatorGone := context.WithCancel(ctx)
	defer creatorGone()
	var sb *sandbox.Sandbox
	if o.fromSnapshot != "" {
		snap, err := sandbox.LoadSnapshot(o.fromSnapshot)
		if err != nil {
			return fail(exitRefused, err)
		}
		sb, err = sandbox.Fork(ctx, snap, opts)
		if err != nil {
			return fail(sandbox.ExitCode(err), err)
		}
	} else if sb, err = sandbox.Provision(ctx, spec, opts); err != nil {
		return fail(sandbox.ExitCode(err), err)
	}
	rec := &sandbox.Record{ID: id, Name: o.name, Labels: labels, Created: time.Now().UTC(), Args: flags}
	err = sandbox.SuperviseWith(ctx, g.store(), rec, sb, sandbox.SuperviseOptions{
		Ready: func() {
			if _, err := fmt.Fprintln(ready, "ok"); err != nil {
				log.Debug("tent create is gone: ending the sandbox nobody knows of", "err", err)
				creatorGone()
			}
			ready.Close()
		},
		IdleAfter:  idleAfter,
		ResumeArgs: o.resumeArgs(g, id),
	})
	if err != nil {
		return fail(exitRefused, err)
	}
	return nil
}

// argsAfter returns the arguments that follow the first occurrence of s.
func argsAfter(argv []string, s string) []string {
	for i, a := range argv {
		if a == s {
			return argv[i+1:]
		}
	}
	return nil
}

// readFlags reads the supervisor's create flags from f (fd 4): a JSON
// array of strings, at most 16 MiB.
func readFlags(f *os.File) ([]string, error) {
	defer f.Close()
	var flags []string
	if err := json.NewDecoder(io.LimitReader(f, 16<<20)).Decode(&flags); err != nil {
		return nil, fmt.Errorf("reading the create flags from fd 4: %w", err)
	}
	return flags, nil
}
