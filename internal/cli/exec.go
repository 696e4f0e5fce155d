package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

func newExecCmd(g *Globals) *cobra.Command {
	var timeout, workdir, maxOutput string
	var env []string
	var detach bool
	tf := termFlags{}
	c := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox made by tent create, with its exit status",
		Long: `Run a command in a sandbox made by tent create and exit with its status.

Signals SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to
tent exec are delivered to the command's foreground process group (with
-t, the foreground job of the terminal inside: Ctrl-C in
'tent exec -it ID -- bash' interrupts the running job and the shell
stays). The command ends when tent exec is killed.

With -d the command is the sandbox's, not tent exec's: tent exec prints
its pid and exits, and the command runs on, without terminal, its
output kept (the last MiB) for tent attach; tent ps lists such commands
and tent kill signals them. With -d -i its stdin stays open: tent attach
writes its own stdin to the command.`,
		Example: `  tent exec box -- make test
  tent exec -it -w /work -e TERM=xterm box -- bash
  pid=$(tent exec -d box -- python3 -m http.server 8000) && tent ps box`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			// tent exec only hands the request to the sandbox's supervisor
			// and waits: one P. With two, each goroutine it starts and each
			// of the eight signals it catches (a round trip to the
			// runtime's signal-mask thread each) woke another thread on
			// the CPUs the supervisor and the command need: 0.95x the wall
			// time, 0.91x the CPU of a warm tent exec (docs/benchmarks.md).
			runtime.GOMAXPROCS(1)
			sb, err := g.handle(args[0])
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
				d, err := policy.ParseDuration(timeout)
				if err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--timeout %q: %v", timeout, err)}
				}
				req.Timeout = d
			}
			if detach {
				if tf.tty || maxOutput != "" {
					return &exitError{code: exitRefused, msg: "-d runs the command without stdin or terminal (but for -i: its stdin then stays open for tent attach), its output kept for tent attach: -t and --max-output do not apply"}
				}
				p, err := sb.Start(c.Context(), req, sandbox.StartOptions{Stdin: tf.interactive})
				if err != nil {
					return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
				}
				fmt.Fprintln(c.OutOrStdout(), p.Pid())
				return nil
			}
			if maxOutput != "" {
				n, err := policy.ParseSize(maxOutput)
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
			// Signals go to the command's foreground process group, through
			// the supervisor; the command ends if tent exec is killed (the
			// supervisor kills it when this connection closes).
			sigs := notifySignals()
			defer sigs.stop()
			stdio := [3]*os.File{os.Stdin, os.Stdout, os.Stderr}
			var ct *callerTerm
			if tf.tty {
				var err error
				if ct, err = openCallerTerm(tf); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				defer ct.restore()
				req.TTY = &sandbox.Terminal{Size: ct.size()}
				if !tf.interactive {
					null, err := os.Open(os.DevNull)
					if err != nil {
						return &exitError{code: exitRefused, msg: err.Error()}
					}
					defer null.Close()
					stdio[0] = null
				}
			}
			req.Stdin, req.Stdout, req.Stderr = stdio[0], stdio[1], stdio[2]
			fwd := make(chan os.Signal, 16)
			req.Signals = fwd
			var resize chan sandbox.WindowSize
			if req.TTY != nil {
				resize = make(chan sandbox.WindowSize, 4)
				req.TTY.Resize = resize
			}
			sigs.start(ct, resize, func(s os.Signal) {
				select {
				case fwd <- s:
				default:
				}
			})
			res, err := sb.Exec(context.Background(), req)
			sigs.stop()
			ct.restore()
			if err != nil {
				msg := err.Error()
				if strings.Contains(msg, sandbox.ErrWorkDir.Error()) {
					msg = remoteWorkdirMessage(workdir, msg)
				}
				return &exitError{code: sandbox.ExitCode(err), msg: msg}
			}
			if res.OOMKilled {
				// The limit is in the record's Spec, which the exec did not
				// need to read.
				var limit int64
				if i, err := sb.Info(c.Context()); err == nil {
					limit = i.Spec.Limits.Memory
				}
				printError(os.Stderr, oomNote(res.Signal == "killed", limit))
			}
			if res != nil && len(res.NetworkDenied) > 0 {
				printError(os.Stderr, netpolicy.Summary(res.NetworkDenied))
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
	c.Flags().StringArrayVarP(&env, "env", "e", nil, "set variable `K=V` (repeatable)")
	c.Flags().StringVarP(&workdir, "workdir", "w", "", "working `DIR` inside")
	tf.register(c.Flags())
	c.Flags().BoolVarP(&detach, "detach", "d", false, "run the command in the background, owned by the sandbox: print its pid and exit (see tent ps, tent attach, tent kill)")
	c.Flags().StringVar(&maxOutput, "max-output", "", "keep at most `SIZE` of stdout and of stderr (e.g. 64K, 1M); the rest is dropped and the command keeps running")
	return c
}

// remoteWorkdirMessage names --workdir and the path for a working
// directory the sandbox refused (msg is the supervisor's message, which
// ends with the errno's text).
func remoteWorkdirMessage(dir, msg string) string {
	why := "unusable"
	switch {
	case strings.HasSuffix(msg, syscall.ENOENT.Error()):
		why = "no such directory in the sandbox"
	case strings.HasSuffix(msg, syscall.ENOTDIR.Error()):
		why = "not a directory in the sandbox"
	}
	return fmt.Sprintf("--workdir %s: %s", dir, why)
}
