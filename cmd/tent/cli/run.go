package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// forwarded are the signals tent passes on to the command's foreground
// process group (SIGWINCH resizes the command's terminal with -t).
var forwarded = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// signalForwarder passes the signals tent receives on to a command: each
// of forwarded but SIGWINCH to deliver, SIGWINCH as a new size of ct's
// terminal to resize (when both are set; otherwise it is dropped).
// Signals that arrive before start wait in the channel (16 deep) and go
// once forwarding starts.
type signalForwarder struct {
	sigs chan os.Signal
	done chan struct{}
	// caught is closed once the signals are caught (see notifySignals).
	caught chan struct{}
}

// notifySignals starts catching the forwarded signals, in a goroutine:
// os/signal makes a round trip to the runtime's signal thread for every
// signal it starts (or stops) catching, and the seven of them, caught
// and released again, were a sixth of a `tent run` or a `tent exec` on a
// busy 2-CPU host. A signal that arrives in the fraction of a millisecond
// before they are caught ends tent as it would without tent's handling:
// as a SIGKILL would at any time, which tent's cleanup is built for (the
// init dies with its host, a later start removes a stale cgroup).
func notifySignals() *signalForwarder {
	f := &signalForwarder{sigs: make(chan os.Signal, 16), done: make(chan struct{}), caught: make(chan struct{})}
	go func() {
		signal.Notify(f.sigs, forwarded...)
		close(f.caught)
	}()
	return f
}

// start forwards until stop. Once the signals are caught it also sends
// the terminal's size once more: a SIGWINCH that came before (the caller
// resized at once) was lost, its default being to be ignored.
func (f *signalForwarder) start(ct *callerTerm, resize chan<- sandbox.WindowSize, deliver func(os.Signal)) {
	sendSize := func() {
		if ct != nil && resize != nil {
			select {
			case resize <- ct.size():
			default:
			}
		}
	}
	go func() {
		caught := f.caught
		for {
			select {
			case <-caught:
				caught = nil
				sendSize()
			case s := <-f.sigs:
				if s == syscall.SIGWINCH {
					sendSize()
					continue
				}
				deliver(s)
			case <-f.done:
				return
			}
		}
	}()
}

// stop ends forwarding at once, and catching in a goroutine that tent,
// which exits next, need not wait for; it may be called more than once.
func (f *signalForwarder) stop() {
	select {
	case <-f.done:
	default:
		close(f.done)
		go func() {
			<-f.caught
			signal.Stop(f.sigs)
		}()
	}
}

// termFlags are -t and -i, as docker and podman spell them.
type termFlags struct {
	tty, interactive bool
}

func (f *termFlags) register(fs *pflag.FlagSet) {
	fs.BoolVarP(&f.tty, "tty", "t", false, "run the command on a terminal inside the sandbox (with -i, your terminal is put in raw mode meanwhile)")
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "with -t, connect tent's stdin to the terminal inside (without -t, stdin is passed as it is anyway)")
}

// callerTerm is the caller's side of a -t run or exec: the terminal to
// take the size from, and the raw mode to undo.
type callerTerm struct {
	sizeFD int // a terminal of the caller's (stdout, else stdin), or -1
	raw    *term.State
	rawFD  int
}

// openCallerTerm prepares the caller's terminal for a command on a
// terminal inside: with -i and a terminal as stdin, raw mode (keys such
// as Ctrl-C, Ctrl-Z and Ctrl-D then reach the terminal inside, which
// acts on them). restore must be called on every way out.
func openCallerTerm(f termFlags) (*callerTerm, error) {
	ct := &callerTerm{sizeFD: -1, rawFD: -1}
	for _, fd := range []int{int(os.Stdout.Fd()), int(os.Stdin.Fd())} {
		if term.IsTerminal(fd) {
			ct.sizeFD = fd
			break
		}
	}
	if f.interactive && term.IsTerminal(int(os.Stdin.Fd())) {
		st, err := term.MakeRaw(int(os.Stdin.Fd()))
		if err != nil {
			return nil, fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		ct.raw, ct.rawFD = st, int(os.Stdin.Fd())
	}
	return ct, nil
}

// size is the caller's terminal size (zero when it has none).
func (ct *callerTerm) size() sandbox.WindowSize {
	if ct.sizeFD < 0 {
		return sandbox.WindowSize{}
	}
	w, h, err := term.GetSize(ct.sizeFD)
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return sandbox.WindowSize{}
	}
	return sandbox.WindowSize{Rows: uint16(h), Cols: uint16(w)}
}

// restore undoes raw mode; it may be called more than once.
func (ct *callerTerm) restore() {
	if ct != nil && ct.raw != nil {
		_ = term.Restore(ct.rawFD, ct.raw)
		ct.raw = nil
	}
}

func newRunCmd(g *Globals) *cobra.Command {
	o := &RunOptions{}
	tf := &termFlags{}
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

Signals SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to
tent are delivered to the command's foreground process group, as a
shell's terminal does: with -t, the foreground job of the terminal
inside; without, the command and every descendant still in its process
group. With -t, SIGWINCH resizes the terminal inside.

-t runs the command on a terminal of the sandbox's own (a shell gets job
control, full-screen programs work); -it also connects your stdin to it
and puts your terminal in raw mode until tent exits, whatever way it
exits. Your own terminal is never passed into the sandbox.

Exit status: the command's own; 128+N when it was killed by signal N;
124 on timeout; 125 when tent failed or refused (bad flag or value, bad
policy, host cannot enforce a protection); 126 when the command is not
executable; 127 when it was not found.`,
		Example: `  tent run -- sh -c 'id; hostname'
  tent run --rw .:/work --workdir /work --memory 1G --timeout 5m -- make test
  tent run --policy agent.yaml --report run.json -- python3 tool.py
  tent run -it --rw .:/work -- bash`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{cmd: c.CommandPath(), err: errors.New("missing command: want tent run [flags] -- CMD [ARGS...]")}
			}
			return o.run(c, g.logger(), *tf, args)
		},
	}
	// Everything after the command is the command's: tent run ls -l.
	c.Flags().SetInterspersed(false)
	o.register(c.Flags())
	tf.register(c.Flags())
	return c
}

// run builds the sandbox, runs args in it with tent's own stdio, and
// returns an *exitError carrying the exit code.
func (o *RunOptions) run(c *cobra.Command, log *slog.Logger, tf termFlags, args []string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("cannot find the current directory: %v", err)}
	}
	spec, err := BuildSpec(c.Flags(), o, os.LookupEnv, cwd, log)
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
	var resize chan sandbox.WindowSize
	var ct *callerTerm
	if tf.tty {
		if ct, err = openCallerTerm(tf); err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		defer ct.restore()
		resize = make(chan sandbox.WindowSize, 1)
		cmd.TTY = &sandbox.Terminal{Size: ct.size(), Resize: resize}
		cmd.Stderr = nil
		if !tf.interactive {
			cmd.Stdin = nil
		}
	}
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
	sigs := notifySignals()
	defer sigs.stop()
	if err := cmd.Start(); err != nil {
		return o.finish(&spec, cmd, err)
	}
	if log != nil {
		log.Info("sandbox started", "tier", cmd.Report.Tier)
	}
	sigs.start(ct, resize, func(s os.Signal) {
		err := cmd.Signal(s.(syscall.Signal))
		if log != nil {
			log.Debug("forwarded signal", "signal", s, "err", err)
		}
	})
	err = cmd.Wait()
	sigs.stop()
	ct.restore() // before tent's own messages
	return o.finish(&spec, cmd, err)
}

// finish writes the report, prints what tent has to say about the run,
// and turns its outcome into an exit code.
func (o *RunOptions) finish(spec *sandbox.Spec, cmd *sandbox.Cmd, runErr error) error {
	rep := cmd.Report
	if rep != nil {
		// An agent reading stderr learns why its request failed.
		if s := policy.DeniedSummary(rep.NetworkDenied); s != "" {
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
		if rep != nil && rep.OOMKilled {
			printError(os.Stderr, oomNote(false, false, rep.MemoryLimit))
		}
		return nil
	case errors.As(runErr, &ee):
		switch r := ee.Report; {
		case r.TimedOut:
			return &exitError{code: ee.ExitCode(), msg: ee.Error()}
		case r.OOMKilled:
			return &exitError{code: ee.ExitCode(), msg: oomNote(r.Signal == syscall.SIGKILL.String(), false, r.MemoryLimit)}
		}
		// The command's own exit or signal: nothing to add.
		return &exitError{code: ee.ExitCode()}
	case errors.Is(runErr, sandbox.ErrWorkDir):
		return &exitError{code: exitRefused, msg: workdirMessage(spec.Workdir, runErr)}
	}
	return &exitError{code: sandbox.ExitCode(runErr), msg: runErr.Error()}
}

// oomNote is tent's one line about an OOM kill: of the command itself
// (self) or of another process of its tree. In a long-lived sandbox
// (shared) the kill counted may also have been another command's: the
// count is the sandbox cgroup's (sandbox.ExecResult), and the line says
// no more than that.
func oomNote(self, shared bool, memoryLimit int64) string {
	limit := "none"
	if memoryLimit > 0 {
		limit = policy.FormatSize(memoryLimit)
	}
	switch {
	case self:
		return fmt.Sprintf("killed by the OOM killer (memory limit %s)", limit)
	case shared:
		return fmt.Sprintf("the OOM killer killed a process in the sandbox while the command ran: of its tree, or another command's (memory limit %s)", limit)
	}
	return fmt.Sprintf("the OOM killer killed a process of the command's tree (memory limit %s)", limit)
}

// workdirMessage names --workdir and the path for a refused working
// directory (sandbox.ErrWorkDir), with the reason.
func workdirMessage(dir string, err error) string {
	why := "unusable"
	switch {
	case errors.Is(err, syscall.ENOENT):
		why = "no such directory in the sandbox"
	case errors.Is(err, syscall.ENOTDIR):
		why = "not a directory in the sandbox"
	}
	return fmt.Sprintf("--workdir %s: %s", dir, why)
}

// userChoice reports whether a protection is off because the user asked
// for it (--net host, --seccomp unconfined), so no warning is due.
func userChoice(spec *sandbox.Spec, p sandbox.Protection) bool {
	switch p.Name {
	case "network namespace":
		return spec.Network.Mode == "host"
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
	c.Env = envNames(s.Env)
	b, err := json.Marshal(&c)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
