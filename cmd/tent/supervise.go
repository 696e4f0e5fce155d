package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

// The supervisor is `tent __supervise ID CREATE-FLAGS...`, started by
// `tent create` in its own session. It provisions the sandbox, serves it
// (sandbox.Supervise) and writes "ok" — or "error CODE MESSAGE" — to fd 3
// once the sandbox is ready. It lives until `tent rm`, SIGTERM, or the
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

func (o *createOptions) supervise(c *cobra.Command, g *globalOptions, id string) error {
	ready := os.NewFile(3, "ready")
	defer ready.Close()
	fail := func(code int, err error) error {
		if _, werr := fmt.Fprintf(ready, "error %d %s\n", code, err); werr != nil {
			// tent create is gone: nobody will read the log.
			_ = os.Remove(strings.TrimSuffix(g.store().SocketPath(id), ".sock") + ".log")
		}
		return &exitError{code: code}
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
	opts := sandbox.ProvisionOptions{Logger: log, IdleAfter: idleAfter}
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
	rec := &sandbox.Record{ID: id, Name: o.name, Labels: labels, Created: time.Now().UTC(), Args: argsAfter(os.Args, id)}
	err = sandbox.Supervise(ctx, g.store(), rec, sb, func() {
		if _, err := fmt.Fprintln(ready, "ok"); err != nil {
			log.Debug("tent create is gone: ending the sandbox nobody knows of", "err", err)
			creatorGone()
		}
		ready.Close()
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
