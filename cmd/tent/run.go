package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// forwarded are the signals tent passes on to the command.
var forwarded = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

func newRunCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in a fresh sandbox",
		Long: `Run one command in a fresh sandbox and exit with its status.

The sandbox has its own user, mount, pid, ipc, uts, cgroup and network
namespaces, a tmpfs root with the host's system directories read-only,
no capabilities, no_new_privs, a Landlock ruleset and a seccomp filter.
Nothing of the host's files is visible unless mounted with --ro or --rw,
and the environment is clean (PATH, HOME, TERM, LANG, TZ, USER) unless
--env, --env-pass, --env-file or --env-inherit add to it.

Signals SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH
sent to tent are forwarded to the command.

Exit status: the command's own; 128+N when it was killed by signal N;
124 on timeout; 125 when tent failed or refused (bad flag or value, bad
policy, host cannot enforce a protection); 126 when the command is not
executable; 127 when it was not found.`,
		Example: `  tent run -- sh -c 'id; hostname'
  tent run --rw .:/work --workdir /work --memory 1G --timeout 5m -- make test
  tent run --policy agent.yaml --report run.json -- python3 tool.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{cmd: c.CommandPath(), err: errors.New("missing command: want tent run [flags] -- CMD [ARGS...]")}
			}
			return o.run(c, g.logger(), args)
		},
	}
	// Everything after the command is the command's: tent run ls -l.
	c.Flags().SetInterspersed(false)
	o.register(c.Flags())
	return c
}

// run builds the sandbox, runs args in it with tent's own stdio, and
// returns an *exitError carrying the exit code.
func (o *runOptions) run(c *cobra.Command, log *slog.Logger, args []string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("cannot find the current directory: %v", err)}
	}
	spec, err := buildSpec(c.Flags(), o, os.LookupEnv, cwd, log)
	if err != nil {
		return &exitError{code: exitRefused, msg: err.Error()}
	}
	if log != nil {
		log.Debug("spec", "spec", specJSON(&spec))
	}

	if o.report != "" {
		// Settled now, while the path is the caller's (see reportDest).
		if o.reportTo, err = openReport(o.report); err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--report: %v", err)}
		}
		defer o.reportTo.close()
	}
	cmd := sandbox.Command(context.Background(), spec, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Logger = log
	if o.netLog != "" {
		// Appended, never truncated: one log can span several runs.
		f, err := os.OpenFile(o.netLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--net-log: %v", err)}
		}
		defer f.Close()
		cmd.NetLog = f
	}

	// Signals that arrive while the sandbox starts wait in the channel and
	// are forwarded once the command runs.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return o.finish(&spec, cmd, err)
	}
	if log != nil {
		log.Info("sandbox started", "tier", cmd.Report.Tier)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				err := cmd.Signal(s.(syscall.Signal))
				if log != nil {
					log.Debug("forwarded signal", "signal", s, "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	return o.finish(&spec, cmd, err)
}

// finish writes the report, prints what tent has to say about the run,
// and turns its outcome into an exit code.
func (o *runOptions) finish(spec *sandbox.Spec, cmd *sandbox.Cmd, runErr error) error {
	rep := cmd.Report
	if rep != nil {
		// An agent reading stderr learns why its request failed.
		if s := netpolicy.Summary(rep.NetworkDenied); s != "" {
			printError(os.Stderr, s)
		}
	}
	if rep != nil && spec.BestEffort {
		for _, p := range rep.Protections {
			if p.Status != sandbox.Enforced && !userChoice(spec, p) {
				printError(os.Stderr, fmt.Sprintf("warning: %s: %s%s", p.Name, p.Status, detail(p.Detail)))
			}
		}
	}
	if o.reportTo != nil && rep != nil {
		if err := o.reportTo.write(rep); err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--report: %v", err)}
		}
	}
	var ee *sandbox.ExitError
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &ee):
		switch r := ee.Report; {
		case r.TimedOut:
			return &exitError{code: ee.ExitCode(), msg: ee.Error()}
		case r.OOMKilled:
			limit := "none"
			if r.MemoryLimit > 0 {
				limit = sandbox.FormatSize(r.MemoryLimit)
			}
			return &exitError{code: ee.ExitCode(), msg: fmt.Sprintf("killed by the OOM killer (memory limit %s)", limit)}
		}
		// The command's own exit or signal: nothing to add.
		return &exitError{code: ee.ExitCode()}
	}
	return &exitError{code: sandbox.ExitCode(runErr), msg: runErr.Error()}
}

// userChoice reports whether a protection is off because the user asked
// for it (--net host, --seccomp unconfined), so no warning is due.
func userChoice(spec *sandbox.Spec, p sandbox.Protection) bool {
	switch p.Name {
	case "network namespace":
		return spec.Network.Mode == netpolicy.Host
	case "seccomp":
		return spec.Seccomp.Unconfined
	}
	return false
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// specJSON renders a spec for the debug log, with only the names of its
// environment variables (they often hold secrets).
func specJSON(s *sandbox.Spec) string {
	c := *s
	c.Env = make([]string, len(s.Env))
	for i, kv := range s.Env {
		k, _, _ := strings.Cut(kv, "=")
		c.Env[i] = k
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
