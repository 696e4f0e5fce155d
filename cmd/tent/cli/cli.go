// Package cli is tent's command line: the verbs, their flags and their
// output, over package supervised's backend. Two programs run it:
// cmd/tent, the sandbox verbs (and tent-runc), and cmd/tent-server, which
// adds the servers (serve, mcp) and the packages only they need
// (protobuf, Connect, the MCP SDK). Keeping those out of tent keeps every
// tent start, and every sandbox init re-executed from it, that much
// shorter (docs/benchmarks.md); tent hands serve and mcp to tent-server
// (see [Main]).
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/doctor"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// exitRefused is tent's own failure or refusal.
const exitRefused = 125

// mainStart is when main began, and startAge how long the process had
// run by then (doctor.ProcessStartAge), for -v.
var (
	mainStart time.Time
	startAge  time.Duration
)

// Servers makes the server verbs (serve, mcp) for tent-server's [Main].
type Servers func(g *Globals) []*cobra.Command

// Main runs the tent command line args (without the program's name) and
// returns the exit code; the program calls sandbox.Init before it.
// servers is nil in tent, whose serve and mcp then hand the whole
// command line to tent-server (see forwardToServer); tent-server passes
// its own.
func Main(args []string, servers Servers) int {
	mainStart, startAge = time.Now(), doctor.ProcessStartAge()
	if servers != nil {
		checkForwarder(os.Stderr)
	}
	return execute(args, servers)
}

// exitError ends tent with code after printing msg (when not empty) as
// "tent: msg" on stderr.
type exitError struct {
	code int
	msg  string
	err  error // what it reports, when it has one (see Unwrap)
}

func (e *exitError) Error() string { return e.msg }

// Unwrap returns the error the exit reports, if any.
func (e *exitError) Unwrap() error { return e.err }

// ExitRefused is the exit code of tent's own failure or refusal.
const ExitRefused = exitRefused

// Exit is an error that, returned by a verb, ends the program with code
// after printing msg (when not empty) as "tent: msg" on stderr.
func Exit(code int, msg string) error { return &exitError{code: code, msg: msg} }

// usageError is a bad command line; the message gets a pointer to --help.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v\nrun '%s --help' for usage", e.err, e.cmd)
}

func (e *usageError) Unwrap() error { return e.err }

// execute runs the tent command line args and returns the exit code.
func execute(args []string, servers Servers) int {
	root := newRootCmd(args, servers)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			printError(os.Stderr, ee.msg)
		}
		return ee.code
	}
	var ue *usageError
	if !errors.As(err, &ue) {
		// cobra's own errors (unknown command, bad flag outside RunE).
		err = &usageError{cmd: cmd.CommandPath(), err: err}
	}
	printError(os.Stderr, err.Error())
	return exitRefused
}

func printError(w io.Writer, msg string) {
	fmt.Fprintf(w, "tent: %s\n", strings.TrimRight(cliWords(msg), "\n"))
}

// cliWords translates what the library's messages say in Go terms into
// the CLI's flags.
func cliWords(msg string) string {
	msg = strings.ReplaceAll(msg, "Spec.Name ", "--name ")
	return strings.ReplaceAll(msg, sandbox.BestEffortHint, "run with best effort (--best-effort) to accept the degradation")
}

// Globals are the flags every subcommand has.
type Globals struct {
	verbose  bool
	stateDir string
	// args is the whole command line, for tent-server (forwardToServer).
	args []string
}

// Verbose reports -v.
func (g *Globals) Verbose() bool { return g.verbose }

// StateDir is the absolute state directory (--state-dir, else the
// default), once the command line is parsed.
func (g *Globals) StateDir() string { return g.stateDir }

// logger returns the debug logger (-v) or nil.
func (g *Globals) logger() *slog.Logger {
	if !g.verbose {
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The CLI's own start: its exec and C library (before the
	// constructors ran), the Go runtime and every package initialiser
	// (before main), the command line (since main).
	log.Debug("tent started", "runtime start and initialisers", startAge, "since main", time.Since(mainStart))
	return log
}

func newRootCmd(args []string, servers Servers) *cobra.Command {
	g := &Globals{args: args}
	root := &cobra.Command{
		Use:   "tent",
		Short: "Run untrusted commands in a Linux-native sandbox",
		Long: `tent runs untrusted commands (an AI agent's tool calls, a CI step, a
downloaded script) in a Linux sandbox built from namespaces, Landlock,
seccomp and cgroups: no daemon, no image, no root required.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.Version = Version()
	root.SetVersionTemplate("tent {{.Version}}\n")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "debug log on stderr")
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "state `DIR` of long-lived sandboxes (default $TENT_STATE_DIR, /var/lib/tent for root, else $XDG_STATE_HOME/tent)")
	// The state directory is made absolute once, before any verb uses it:
	// every supervisor and record names it, whatever its caller's cwd.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		dir := g.stateDir
		if dir == "" {
			dir = supervised.DefaultStateDir()
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("--state-dir %q: %v", dir, err)}
		}
		g.stateDir = abs
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{cmd: c.CommandPath(), err: err}
	})
	root.AddCommand(newRunCmd(g), newCreateCmd(g), newExecCmd(g), newPsCmd(g), newAttachCmd(g), newKillCmd(g), newLsCmd(g), newInspectCmd(g), newNetCmd(g), newSecretCmd(g), newPortCmd(g), newMountCmd(g), newRmCmd(g),
		newSuspendCmd(g, true), newSuspendCmd(g, false), newCpCmd(g), newDiffCmd(g), newExportCmd(g),
		newSnapshotCmd(g), newForkCmd(g), newStatsCmd(g), newCompletionCmd(),
		newDoctorCmd(), newVersionCmd())
	if servers != nil {
		root.AddCommand(servers(g)...)
	} else {
		root.AddCommand(serverForwarders(g)...)
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tent's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), "tent", Version())
			return err
		},
	}
}

// Version is the module version, or "devel" and the VCS revision of a
// development build, followed by the Go version.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
		var rev, dirty string
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = " " + s.Value[:min(12, len(s.Value))]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		v += rev + dirty
	}
	return v + " " + info.GoVersion
}
