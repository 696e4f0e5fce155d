package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

func newExecCmd(g *globalOptions) *cobra.Command {
	var timeout, workdir, maxOutput string
	var env []string
	c := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox made by tent create, with its exit status",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			argv := args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return &usageError{cmd: c.CommandPath(), err: errors.New("missing command: want tent exec [flags] ID -- CMD [ARGS...]")}
			}
			req := sandbox.ExecRequest{Args: argv, Env: env, Dir: workdir}
			if timeout != "" {
				d, err := sandbox.ParseDuration(timeout)
				if err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--timeout %q: %v", timeout, err)}
				}
				req.Timeout = d
			}
			if maxOutput != "" {
				n, err := sandbox.ParseSize(maxOutput)
				if err == nil && n == 0 {
					err = errors.New("want a positive size (leave the flag out for no cap)")
				}
				if err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--max-output %q: %v", maxOutput, err)}
				}
				req.MaxOutput = n
			}
			for _, kv := range env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--env %q: want K=V", kv)}
				}
			}
			// Interrupting tent exec ends the command: the supervisor
			// kills it when this connection closes.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			go func() {
				s := <-sigs
				os.Exit(128 + int(s.(syscall.Signal)))
			}()
			res, blocked, err := sandbox.RemoteExec(rec, req, [3]*os.File{os.Stdin, os.Stdout, os.Stderr})
			if err != nil {
				return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
			}
			if blocked != "" {
				printError(os.Stderr, blocked)
			}
			for _, tr := range []struct {
				name string
				cut  bool
			}{{"stdout", res.StdoutTruncated}, {"stderr", res.StderrTruncated}} {
				if tr.cut {
					printError(os.Stderr, fmt.Sprintf("%s truncated at --max-output %s: the rest was dropped", tr.name, maxOutput))
				}
			}
			if res.TimedOut {
				return &exitError{code: res.ExitCode, msg: "timed out after " + timeout + ": command killed"}
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode}
			}
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().StringVar(&timeout, "timeout", "", "kill the command after `DURATION`")
	c.Flags().StringArrayVar(&env, "env", nil, "set variable `K=V` (repeatable)")
	c.Flags().StringVar(&workdir, "workdir", "", "working `DIR` inside")
	c.Flags().StringVar(&maxOutput, "max-output", "", "keep at most `SIZE` of stdout and of stderr (e.g. 64K, 1M); the rest is dropped and the command keeps running")
	return c
}
