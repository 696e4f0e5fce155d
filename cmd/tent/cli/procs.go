package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		Short: "List the commands started in a sandbox with tent exec -d (and its service), running and finished",
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
				fmt.Fprintln(tw, "PID\tSTATE\tSTARTED\tUNREAD\tTAG\tCOMMAND")
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
					tag := "" // "service": the sandbox's service (spec.service)
					if p.Tag != "" {
						tag = policy.QuotePath(p.Tag)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", p.Pid, state, p.Started.Local().Format(time.TimeOnly), p.Unread, tag, strings.Join(cmd, " "))
				}
				return tw.Flush()
			})
		},
	}
	out.register(c.Flags())
	return c
}

func newAttachCmd(g *Globals) *cobra.Command {
	var noStdin bool
	c := &cobra.Command{
		Use:   "attach ID PID",
		Short: "Follow a command started with tent exec -d: its output since the last reader, until it exits, with its exit status",
		Long: `Follow a command started with tent exec -d: print its output that no
earlier reader took (the last MiB of it at most), then what it writes,
until it exits; exit with its status. Signals sent to tent attach
(SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are delivered to the
command; killing tent attach leaves the command running. A command
started with tent exec -d -i gets tent attach's stdin (unless
--no-stdin), and at its end, the end of its own.

A command started with tent exec -d -t runs on a terminal inside: tent
attach connects yours to it (in raw mode with -i, sized as yours and
resized with it). Ctrl-P Ctrl-Q detaches, leaving it running.`,
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
			p, pi, err := findProcess(c.Context(), rec.sb, pid)
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			res, err := attachProcess(context.Background(), p, pi, !noStdin)
			if errors.Is(err, errDetached) {
				fmt.Fprintf(c.ErrOrStderr(), "detached from %d, which runs on (tent attach %s %d)\n", pid, args[0], pid)
				return nil
			}
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&noStdin, "no-stdin", false, "do not write tent attach's stdin to the command")
	return c
}

// findProcess finds the sandbox's process pid and describes it.
func findProcess(ctx context.Context, h sandbox.Handle, pid int) (sandbox.Process, sandbox.ProcessInfo, error) {
	p, err := h.Process(ctx, pid)
	if err != nil {
		return nil, sandbox.ProcessInfo{}, err
	}
	procs, err := h.Processes(ctx)
	if err != nil {
		return nil, sandbox.ProcessInfo{}, err
	}
	i := slices.IndexFunc(procs, func(pi sandbox.ProcessInfo) bool { return pi.Pid == pid })
	if i < 0 { // it ended and went between the two calls
		return p, sandbox.ProcessInfo{Pid: pid}, nil
	}
	return p, procs[i], nil
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
			p, err := rec.sb.Process(c.Context(), pid)
			if err == nil {
				err = p.Signal(c.Context(), sig)
			}
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			return nil
		},
	}
	return c
}
