// Command tent runs untrusted commands in a Linux-native sandbox.
//
//	tent run [flags] -- CMD [ARGS...]   run one command in a fresh sandbox
//	tent doctor [--json]               check what this host can enforce
//	tent version                       print the version
//
// Exit statuses of tent run: the command's own; 128+N when it was killed
// by signal N; 124 on timeout; 125 when tent itself failed or refused (bad
// flag or value, bad policy, host cannot enforce); 126 when the command
// was found but is not executable; 127 when it was not found.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/oci"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// exitRefused is tent's own failure or refusal.
const exitRefused = 125

// mainStart is when main began (namespaces.Monotonic), for -v.
var mainStart int64

func main() {
	sandbox.Init() // first: in the re-executed sandbox init this never returns
	mainStart = namespaces.Monotonic()
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == oci.Arg0 {
		// Installed as tent-runc: runc's command line (docs/oci.md).
		os.Exit(oci.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(execute(os.Args[1:]))
}

// exitError ends tent with code after printing msg (when not empty) as
// "tent: msg" on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

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
func execute(args []string) int {
	root := newRootCmd()
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

// globalOptions are the flags every subcommand has.
type globalOptions struct {
	verbose  bool
	stateDir string
}

// logger returns the debug logger (-v) or nil.
func (g *globalOptions) logger() *slog.Logger {
	if !g.verbose {
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The CLI's own start: its exec and C library (before the
	// constructors ran), the Go runtime and every package initialiser
	// (before main), the command line (since main).
	log.Debug("tent started", "runtime start and initialisers", namespaces.Between(namespaces.ProcessStart(), mainStart),
		"since main", namespaces.Between(mainStart, namespaces.Monotonic()))
	return log
}

func newRootCmd() *cobra.Command {
	g := &globalOptions{}
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
	root.Version = version()
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
	root.AddCommand(newRunCmd(g), newCreateCmd(g), newExecCmd(g), newPsCmd(g), newAttachCmd(g), newKillCmd(g), newLsCmd(g), newInspectCmd(g), newNetCmd(g), newPortCmd(g), newMountCmd(g), newRmCmd(g),
		newSuspendCmd(g, true), newSuspendCmd(g, false), newCpCmd(g), newDiffCmd(g), newExportCmd(g),
		newSnapshotCmd(g), newForkCmd(g), newStatsCmd(g), newCompletionCmd(),
		newDoctorCmd(), newVersionCmd(), newServeCmd(g), newMCPCmd(g))
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tent's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), "tent", version())
			return err
		},
	}
}

// version is the module version, or "devel" and the VCS revision of a
// development build, followed by the Go version.
func version() string {
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
