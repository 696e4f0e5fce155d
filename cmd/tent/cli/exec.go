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

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

func newExecCmd(g *Globals) *cobra.Command {
	o := &execOpts{}
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
its pid and exits, and the command runs on, its output kept (the last
MiB) for tent attach; tent ps lists such commands and tent kill signals
them. With -d -i its stdin stays open: tent attach writes its own stdin
to the command. With -d -t it runs on a terminal inside, which tent
attach connects to yours (Ctrl-P Ctrl-Q detaches).`,
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
			req, err := o.request(argv)
			if err != nil {
				return err
			}
			if o.detach {
				return o.startDetached(c, sb, req)
			}
			return o.run(c, sb, req)
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().StringVar(&o.timeout, "timeout", "", "kill the command after `DURATION`")
	c.Flags().StringArrayVarP(&o.env, "env", "e", nil, "set variable `K=V` (repeatable)")
	c.Flags().StringVarP(&o.workdir, "workdir", "w", "", "working `DIR` inside")
	o.tf.register(c.Flags())
	c.Flags().BoolVarP(&o.detach, "detach", "d", false, "run the command in the background, owned by the sandbox: print its pid and exit (see tent ps, tent attach, tent kill)")
	c.Flags().StringVar(&o.maxOutput, "max-output", "", "keep at most `SIZE` of stdout and of stderr (e.g. 64K, 1M); the rest is dropped and the command keeps running")
	return c
}

// execOpts are tent exec's flags.
type execOpts struct {
	timeout, workdir, maxOutput string
	env                         []string
	detach                      bool
	tf                          termFlags
}

// request is the exec request the flags give for argv, its timeout
// checked (the other flags are checked by the mode that uses them).
func (o *execOpts) request(argv []string) (sandbox.ExecRequest, error) {
	req := sandbox.ExecRequest{Args: argv, Env: o.env, Dir: o.workdir}
	if o.timeout != "" {
		d, err := policy.ParseDuration(o.timeout)
		if err != nil {
			return req, &exitError{code: exitRefused, msg: fmt.Sprintf("--timeout %q: %v", o.timeout, err)}
		}
		req.Timeout = d
	}
	return req, nil
}

// startDetached is tent exec -d: the command is the sandbox's; its pid
// is printed.
func (o *execOpts) startDetached(c *cobra.Command, sb sandbox.Handle, req sandbox.ExecRequest) error {
	if o.maxOutput != "" {
		return &exitError{code: exitRefused, msg: "-d keeps the command's output for tent attach (the last MiB of each stream): --max-output does not apply"}
	}
	if o.tf.tty {
		// A terminal inside, sized as the caller's (80x24 without
		// one); tent attach connects one to it.
		ct, err := openCallerTerm(termFlags{tty: true}) // no raw mode: this tent goes now
		if err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		req.TTY = &sandbox.Terminal{Size: ct.size()}
	}
	p, err := sb.Start(c.Context(), req, sandbox.StartOptions{Stdin: o.tf.interactive})
	if err != nil {
		return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
	}
	fmt.Fprintln(c.OutOrStdout(), p.Pid())
	return nil
}

// checkRun checks the flags only a command tent exec waits for uses.
func (o *execOpts) checkRun(req *sandbox.ExecRequest) error {
	if o.maxOutput != "" {
		n, err := policy.ParseSize(o.maxOutput)
		if err == nil && n == 0 {
			err = errors.New("want a positive size (leave the flag out for no cap)")
		}
		if err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--max-output %q: %v", o.maxOutput, err)}
		}
		req.MaxOutput = n
	}
	for _, kv := range o.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--env %q: want K=V", kv)}
		}
	}
	return nil
}

// run runs the command with tent exec's stdio (or a terminal), its
// signals forwarded, and returns its status as tent exec's.
func (o *execOpts) run(c *cobra.Command, sb sandbox.Handle, req sandbox.ExecRequest) error {
	if err := o.checkRun(&req); err != nil {
		return err
	}
	// Signals go to the command's foreground process group, through
	// the supervisor; the command ends if tent exec is killed (the
	// supervisor kills it when this connection closes).
	sigs := notifySignals()
	defer sigs.stop()
	stdio := [3]*os.File{os.Stdin, os.Stdout, os.Stderr}
	var ct *callerTerm
	if o.tf.tty {
		var err error
		if ct, err = openCallerTerm(o.tf); err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		defer ct.restore()
		req.TTY = &sandbox.Terminal{Size: ct.size()}
		if !o.tf.interactive {
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
			msg = remoteWorkdirMessage(o.workdir, msg)
		}
		return &exitError{code: sandbox.ExitCode(err), msg: msg}
	}
	return o.report(c, sb, res)
}

// report prints what the result says beside the exit status (OOM kill,
// denied connections, cut output) and returns the status as tent exec's.
func (o *execOpts) report(c *cobra.Command, sb sandbox.Handle, res *sandbox.ExecResult) error {
	if res.OOMKilled {
		// The limit is in the record's Spec, which the exec did not
		// need to read.
		var limit int64
		if i, err := sb.Info(c.Context()); err == nil {
			limit = i.Spec.Limits.Memory
		}
		printError(os.Stderr, oomNote(res.Signal == "killed", true, limit))
	}
	if len(res.NetworkDenied) > 0 {
		printError(os.Stderr, policy.DeniedSummary(res.NetworkDenied))
	}
	for _, tr := range []struct {
		name string
		cut  bool
	}{{"stdout", res.StdoutTruncated}, {"stderr", res.StderrTruncated}} {
		if tr.cut {
			printError(os.Stderr, fmt.Sprintf("%s truncated at --max-output %s: the rest was dropped", tr.name, o.maxOutput))
		}
	}
	if res.TimedOut {
		return &exitError{code: res.ExitCode, msg: "timed out after " + o.timeout + ": command killed"}
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
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
