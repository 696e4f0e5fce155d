package oci

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Arg0 is the name under which the tent binary speaks runc's command
// line: install a symlink of this name to tent (see docs/oci.md).
const Arg0 = "tent-runc"

// globals are runc's global flags.
type globals struct {
	root, log, logFormat           string
	systemdCgroup, rootless, debug bool
	stdin                          io.Reader
	stdout, stderr                 io.Writer
	logger                         *slog.Logger
}

// ErrUnsupportedCommand is returned for the runc commands and flags tent
// does not implement.
var ErrUnsupportedCommand = errors.New("not supported by tent-runc")

// Main runs runc's command line args (without argv[0]) and returns the
// exit status: 0, or 1 after a fatal error, which goes to --log (as
// {"level":"error","msg":...} with --log-format json) and to stderr, as
// runc writes it (containerd's shim reads the log after a failed create,
// and a failed kill's or delete's output). exec without --detach
// returns the process's status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	fl := flag.NewFlagSet(Arg0, flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&g.root, "root", DefaultRoot, "root directory for storage of container state")
	fl.StringVar(&g.log, "log", "", "log file (default: stderr)")
	fl.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVar(&g.systemdCgroup, "systemd-cgroup", false, "accepted; tent names each container's cgroup itself")
	fl.BoolVar(&g.rootless, "rootless", false, "accepted; tent runs unprivileged by design")
	fl.BoolVar(&g.debug, "debug", false, "debug logging")
	version := fl.Bool("version", false, "print the version")
	fl.BoolVar(version, "v", false, "print the version")
	fl.Usage = func() { usage(stderr, fl) }
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	if *version {
		fmt.Fprintf(stdout, "%s version %s\ncommit: %s\nspec: %s\n", Arg0, buildVersion(), buildCommit(), specs.Version)
		return 0
	}
	var logOut io.Writer = stderr
	if g.log != "" {
		f, err := os.OpenFile(g.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "%s: opening the log file: %v\n", Arg0, err)
			return 1
		}
		defer f.Close()
		logOut = f
	}
	if g.logFormat != "text" && g.logFormat != "json" {
		fmt.Fprintf(stderr, "%s: --log-format %q: want text or json\n", Arg0, g.logFormat)
		return 1
	}
	g.logger = newLogger(logOut, g.logFormat, g.debug)
	rest := fl.Args()
	if len(rest) == 0 {
		usage(stderr, fl)
		return 1
	}
	code, err := run(ctx, g, rest[0], rest[1:])
	if err != nil {
		g.logger.Error(err.Error())
		if g.log != "" {
			// Also on stderr, as runc does: go-runc reports a failed
			// kill or delete by its output ("container not running").
			fmt.Fprintf(stderr, "%s: %v\n", Arg0, err)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}

func usage(w io.Writer, fl *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s [global flags] COMMAND [flags] ID ...\n\ncommands: create, start, state, kill, delete, exec, ps, pause, resume, update, features, list\n\nglobal flags:\n", Arg0)
	fl.PrintDefaults()
}

// commandFlags parses a command's flags; unknown ones are an error that
// names them.
func commandFlags(name string, g *globals, args []string, def func(*flag.FlagSet)) (*flag.FlagSet, error) {
	fl := flag.NewFlagSet(name, flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	def(fl)
	if err := fl.Parse(args); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return fl, nil
}

// oneID returns the single container id of a command's arguments.
func oneID(name string, args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("%s: want exactly one container id, got %d arguments", name, len(args))
	}
	if err := validID(args[0]); err != nil {
		return "", err
	}
	return args[0], nil
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return strings.TrimPrefix(bi.Main.Version, "v")
	}
	return "dev"
}

func buildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// deadline bounds waits on a supervisor.
const deadline = 30 * time.Second
