package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// The commands a sandbox runs detached (tent exec -d): listed by tent ps,
// re-attached by tent attach, signalled by tent kill, as docker spells
// them.

func newPsCmd(g *Globals) *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "ps ID",
		Short: "List the commands started in a sandbox with tent exec -d, running and finished",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			procs, err := rec.sb.Processes(c.Context())
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			w := c.OutOrStdout()
			return emit(&out, w, procs, procs, func() error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PID\tSTATE\tSTARTED\tUNREAD\tCOMMAND")
				for _, p := range procs {
					state := "running"
					if !p.Running {
						state = "exited " + strconv.Itoa(p.Exit)
						if p.Signal != "" {
							state = "killed (" + p.Signal + ")"
						}
					}
					// The command is the sandbox's: quoted, so that it can
					// neither forge a line nor reach the terminal.
					cmd := make([]string, len(p.Args))
					for i, a := range p.Args {
						cmd[i] = policy.QuotePath(a)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", p.Pid, state, p.Started.Local().Format(time.TimeOnly), p.Unread, strings.Join(cmd, " "))
				}
				return tw.Flush()
			})
		},
	}
	out.register(c.Flags())
	return c
}

func newAttachCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "attach ID PID",
		Short: "Follow a command started with tent exec -d: its output since the last reader, until it exits, with its exit status",
		Long: `Follow a command started with tent exec -d: print its output that no
earlier tent attach printed (the last MiB of it at most), then what it
writes, until it exits; exit with its status. Signals sent to tent attach
(SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are delivered to the
command; killing tent attach leaves the command running.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil || pid <= 0 {
				return &exitError{code: exitRefused, msg: fmt.Sprintf("PID %q: want a process id from tent ps", args[1])}
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			sigs := notifySignals()
			defer sigs.stop()
			fwd := make(chan os.Signal, 16)
			sigs.start(nil, nil, func(s os.Signal) {
				select {
				case fwd <- s:
				default:
				}
			})
			res, err := rec.sb.Attach(context.Background(), pid, os.Stdout, os.Stderr, fwd)
			sigs.stop()
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode}
			}
			return nil
		},
	}
	return c
}

func newKillCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "kill ID PID [SIGNAL]",
		Short: "Send a signal (TERM by default) to a command started with tent exec -d",
		Example: `  tent kill box 12
  tent kill box 12 KILL`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil || pid <= 0 {
				return &exitError{code: exitRefused, msg: fmt.Sprintf("PID %q: want a process id from tent ps", args[1])}
			}
			sig := syscall.SIGTERM
			if len(args) == 3 {
				if sig, err = policy.ParseSignal(args[2]); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			if err := rec.sb.SignalProcess(c.Context(), pid, sig); err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			return nil
		},
	}
	return c
}
