package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// createOptions are tent create's flags: run's, plus a name and labels.
type createOptions struct {
	runOptions
	name   string
	labels []string
	// idleAfter is --idle-after: "" (the default), "never" or a duration.
	idleAfter string
	// fromSnapshot (supervisor only) forks the sandbox from a snapshot.
	fromSnapshot string
}

func (o *createOptions) register(f *pflag.FlagSet) {
	o.runOptions.register(f)
	f.StringVar(&o.name, "name", "", "a `NAME` to refer to the sandbox by")
	f.StringArrayVar(&o.labels, "label", nil, "attach a `K=V` label (repeatable)")
	f.StringVar(&o.idleAfter, "idle-after", "", "after `D` with no request, replace the idle sandbox's init and supervisor by small idle holders (default 10s; \"never\" keeps them)")
}

// parseIdleAfter reads --idle-after as sandbox.ProvisionOptions.IdleAfter:
// "" is the default (0), "never" is negative, anything else a positive
// duration.
func parseIdleAfter(v string) (time.Duration, error) {
	switch v {
	case "":
		return 0, nil
	case "never":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--idle-after %q: want a positive duration (such as 30s) or never", v)
	}
	return d, nil
}

func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want K=V", kv)
		}
		m[k] = v
	}
	return m, nil
}

func (g *globalOptions) store() sandbox.Store {
	if g.stateDir != "" {
		return sandbox.Store{Dir: g.stateDir}
	}
	return sandbox.Store{Dir: sandbox.DefaultStateDir()}
}

// lookup finds a sandbox record, as tent's exit-125 refusal when missing.
func (g *globalOptions) lookup(ref string) (*sandbox.Record, error) {
	rec, err := g.store().Get(ref)
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: err.Error()}
	}
	return rec, nil
}

func newCreateCmd(g *globalOptions) *cobra.Command {
	o := &createOptions{}
	c := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a long-lived sandbox and print its id",
		Long: `Create a sandbox that keeps running (owned by a small supervisor process)
until tent rm, and print its id as the last line of stdout. It takes the
same flags as tent run; --timeout bounds the sandbox's whole life.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cwd, _ := os.Getwd()
			if _, err := buildSpec(c.Flags(), &o.runOptions, os.LookupEnv, cwd, nil); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			if _, err := parseLabels(o.labels); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			if _, err := parseIdleAfter(o.idleAfter); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return g.startSupervisor(c, sandbox.NewID(), argsAfter(os.Args, "create"))
		},
	}
	o.register(c.Flags())
	return c
}

// startSupervisor re-executes tent as the sandbox's supervisor, in its own
// session, and waits until the sandbox is ready.
func (g *globalOptions) startSupervisor(c *cobra.Command, id string, flags []string) error {
	store := g.store()
	if err := os.MkdirAll(store.Dir, 0o700); err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("state directory: %v", err)}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	logFile, err := os.OpenFile(store.SocketPath(id)[:len(store.SocketPath(id))-5]+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return &exitError{code: exitRefused, msg: err.Error()}
	}
	defer logFile.Close()
	args := []string{"--state-dir", store.Dir}
	if g.verbose {
		args = append(args, "-v")
	}
	// The create flags go through a pipe (fd 4), never the command line:
	// --env values are secrets, and every user can read a process's argv.
	flagsR, flagsW, err := os.Pipe()
	if err != nil {
		w.Close()
		return err
	}
	defer flagsR.Close()
	cmd := exec.Command("/proc/self/exe", append(args, superviseCmd, id)...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logFile, logFile, []*os.File{w, flagsR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		flagsW.Close()
		return err
	}
	w.Close()
	flagsR.Close()
	go func() {
		_ = json.NewEncoder(flagsW).Encode(flags)
		flagsW.Close()
	}()
	br := bufio.NewReader(r)
	line, _ := br.ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		// A refusal may run over several lines (what is missing, the
		// fix): read it whole, for as long as the supervisor takes to exit.
		_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
		rest, _ := io.ReadAll(io.LimitReader(br, 1<<20))
		_ = cmd.Wait()
		var code int
		var msg string
		if _, err := fmt.Sscanf(line, "error %d", &code); err != nil {
			// Keep the log: it is all there is to say what happened.
			code, msg = exitRefused, "the sandbox's supervisor failed: see "+logFile.Name()
		} else {
			msg = strings.TrimSpace(strings.SplitN(line, " ", 3)[2] + string(rest))
			_ = os.Remove(logFile.Name()) // a refusal leaves nothing behind
		}
		return &exitError{code: code, msg: msg}
	}
	_ = cmd.Process.Release()
	fmt.Fprintln(c.OutOrStdout(), id)
	return nil
}

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

func newLsCmd(g *globalOptions) *cobra.Command {
	var output string
	var quiet, showEnv bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			recs, err := g.store().List()
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			out := c.OutOrStdout()
			switch {
			case quiet:
				for _, r := range recs {
					fmt.Fprintln(out, r.ID)
				}
			case output == "json":
				if recs == nil {
					recs = []*sandbox.Record{}
				}
				if !showEnv {
					for i, r := range recs {
						recs[i] = redactEnv(r)
					}
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(recs)
			case output == "" || output == "table":
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCREATED\tLABELS")
				for _, r := range recs {
					var labels []string
					for k, v := range r.Labels {
						labels = append(labels, k+"="+v)
					}
					sort.Strings(labels)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, r.State, r.Created.Local().Format(time.DateTime), strings.Join(labels, ","))
				}
				return tw.Flush()
			default:
				return &exitError{code: exitRefused, msg: fmt.Sprintf("-o %q: want table or json", output)}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "output format: `table` or json")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	c.Flags().BoolVar(&showEnv, "show-env", false, "with -o json, print environment values (default: names only)")
	return c
}

func newInspectCmd(g *globalOptions) *cobra.Command {
	var showEnv bool
	c := &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox's record as JSON (environment variables by name only, unless --show-env)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			if !showEnv {
				rec = redactEnv(rec)
			}
			enc := json.NewEncoder(c.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(rec)
		},
	}
	c.Flags().BoolVar(&showEnv, "show-env", false, "print environment values too (default: names only)")
	return c
}

func newRmCmd(g *globalOptions) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "rm ID... | --all",
		Short: "Terminate sandboxes and remove them",
		RunE: func(c *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return &usageError{cmd: c.CommandPath(), err: errors.New("give sandbox ids or --all")}
			}
			var recs []*sandbox.Record
			if all {
				list, err := g.store().List()
				if err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				recs = list
			}
			for _, ref := range args {
				rec, err := g.lookup(ref)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			var failed []string
			for _, rec := range recs {
				if err := g.store().Remove(rec); err != nil {
					failed = append(failed, err.Error())
				}
			}
			if len(failed) > 0 {
				return &exitError{code: exitRefused, msg: strings.Join(failed, "\n")}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&all, "all", false, "remove every sandbox")
	return c
}

func newSuspendCmd(g *globalOptions, suspend bool) *cobra.Command {
	use, short, op := "suspend ID", "Freeze every process of a sandbox (cgroup freezer)", sandbox.RemoteSuspend
	if !suspend {
		use, short, op = "resume ID", "Thaw a suspended sandbox", sandbox.RemoteResume
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			if !suspend && rec.State == "stopped" {
				return g.reprovision(c, rec)
			}
			if err := op(rec); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
}

// reprovision brings back a sandbox whose supervisor is gone (a host
// restart, a kill) from its latest snapshot, under the same id.
func (g *globalOptions) reprovision(c *cobra.Command, rec *sandbox.Record) error {
	snaps, err := g.store().Snapshots()
	if err != nil {
		return &exitError{code: exitRefused, msg: err.Error()}
	}
	var latest *sandbox.Snapshot
	for _, s := range snaps {
		if s.SandboxID == rec.ID {
			latest = s
		}
	}
	if latest == nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s is stopped and has no snapshot to resume from (tent rm %s)", rec.ID, rec.ID)}
	}
	flags := []string{"--from-snapshot", latest.Dir}
	if rec.Name != "" {
		flags = append(flags, "--name", rec.Name)
	}
	for k, v := range rec.Labels {
		flags = append(flags, "--label", k+"="+v)
	}
	g.store().Reclaim(rec) // the old layers are superseded by the snapshot's
	var out strings.Builder
	c.SetOut(&out)
	return g.startSupervisor(c, rec.ID, flags)
}

func newNetCmd(g *globalOptions) *cobra.Command {
	var mode string
	var allow, deny []string
	c := &cobra.Command{
		Use:   "net ID [--net none|limited] [--allow-host P]... [--deny-host P]...",
		Short: "Replace a running sandbox's network rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			p := sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: allow, DeniedHosts: deny}
			if c.Flags().Changed("net") {
				if p.Mode, err = sandbox.ParseNet(mode); err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--net: %v", err)}
				}
			}
			if err := p.Validate(); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			if err := sandbox.RemoteSetNetworkPolicy(rec, p); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&mode, "net", "limited", "`none` (deny everything) or limited")
	c.Flags().StringArrayVar(&allow, "allow-host", nil, "allow `PATTERN` (repeatable)")
	c.Flags().StringArrayVar(&deny, "deny-host", nil, "deny `PATTERN` (repeatable)")
	return c
}

func newCpCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox (ID:PATH on one side, - for stdin/stdout)",
		Long: `Copy one file between the host and a sandbox made by tent create, like
docker cp: ID:PATH names a path inside the sandbox (resolved in the
sandbox's own view, with its restrictions), the other side is a host
path or - for stdin/stdout. Directories are not copied: use tar through
tent exec.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			srcID, srcPath, srcIn := splitRef(src)
			dstID, dstPath, dstIn := splitRef(dst)
			if srcIn == dstIn {
				return &usageError{cmd: c.CommandPath(), err: errors.New("exactly one side must be ID:PATH")}
			}
			if srcIn {
				rec, err := g.lookup(srcID)
				if err != nil {
					return err
				}
				out := os.Stdout
				if dst != "-" {
					if out, err = os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
						return &exitError{code: exitRefused, msg: err.Error()}
					}
					defer out.Close()
				}
				devnull, _ := os.Open(os.DevNull)
				defer devnull.Close()
				if err := sandbox.RemoteFile(rec, "read", srcPath, nil, devnull, out); err != nil {
					return &exitError{code: 1, msg: err.Error()}
				}
				return nil
			}
			rec, err := g.lookup(dstID)
			if err != nil {
				return err
			}
			in, mode := os.Stdin, os.FileMode(0o644)
			if src != "-" {
				if in, err = os.Open(src); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				defer in.Close()
				if fi, err := in.Stat(); err == nil {
					if fi.IsDir() {
						return &exitError{code: exitRefused, msg: src + " is a directory: tent cp copies files (use tar through tent exec)"}
					}
					mode = fi.Mode().Perm()
				}
			}
			devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			defer devnull.Close()
			if err := sandbox.RemoteFile(rec, "write", dstPath, []string{fmt.Sprintf("%o", mode)}, in, devnull); err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			return nil
		},
	}
}

// splitRef splits ID:PATH; a host path (or -) has no colon before its
// first slash.
func splitRef(s string) (id, path string, inside bool) {
	id, path, ok := strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/") {
		return "", s, false
	}
	return id, path, true
}

// layer picks the cow mount a diff or export is about.
func layer(rec *sandbox.Record, target string) ([]sandbox.CowLayer, error) {
	if len(rec.Layers) == 0 {
		return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s has no cow mount (create it with --cow SRC[:DST])", rec.ID)}
	}
	if target == "" {
		return rec.Layers, nil
	}
	for _, l := range rec.Layers {
		if l.Target == target {
			return []sandbox.CowLayer{l}, nil
		}
	}
	return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s has no cow mount at %s", rec.ID, target)}
}

func newDiffCmd(g *globalOptions) *cobra.Command {
	var mount string
	c := &cobra.Command{
		Use:   "diff ID",
		Short: "List the files a sandbox added (A), modified (M) and deleted (D) in its cow mounts",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			layers, err := layer(rec, mount)
			if err != nil {
				return err
			}
			all, err := sandbox.DiffLayers(layers)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			for _, mc := range all {
				for _, ch := range mc.Changes {
					// Names are the sandbox's: quoted where they hold
					// control bytes (a newline would forge a line, an
					// escape sequence reach the terminal).
					fmt.Fprintf(c.OutOrStdout(), "%c %s\n", strings.ToUpper(string(ch.Kind))[0], sandbox.QuotePath(path.Join(mc.Target, ch.Path)))
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&mount, "mount", "", "only the cow mount at `TARGET`")
	return c
}

func newExportCmd(g *globalOptions) *cobra.Command {
	var mount, to string
	var patch bool
	c := &cobra.Command{
		Use:   "export ID --patch | --to DIR",
		Short: "Export a sandbox's changes to a cow mount: a unified diff for patch -p1 / git apply, or applied onto a directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if patch == (to != "") {
				return &usageError{cmd: c.CommandPath(), err: errors.New("give exactly one of --patch and --to DIR")}
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			layers, err := layer(rec, mount)
			if err != nil {
				return err
			}
			if len(layers) > 1 {
				var targets []string
				for _, l := range layers {
					targets = append(targets, l.Target)
				}
				return &exitError{code: exitRefused, msg: "several cow mounts: choose one with --mount (" + strings.Join(targets, ", ") + ")"}
			}
			if patch {
				err = sandbox.WritePatch(c.OutOrStdout(), layers[0])
			} else {
				err = sandbox.ExportTo(to, layers[0])
			}
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&patch, "patch", false, "print a unified diff that patch -p1 or git apply applies in the mount's source directory")
	c.Flags().StringVar(&to, "to", "", "apply the changes onto `DIR`")
	c.Flags().StringVar(&mount, "mount", "", "the cow mount at `TARGET` (needed when there are several)")
	return c
}

func newSnapshotCmd(g *globalOptions) *cobra.Command {
	var includeRW bool
	c := &cobra.Command{
		Use:   "snapshot [--include-rw] ID",
		Short: "Snapshot a sandbox's writable layers (cow changes, /tmp, $HOME) and print the snapshot's id",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			id, err := sandbox.RemoteSnapshot(rec, sandbox.SnapshotOptions{IncludeReadWrite: includeRW})
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			fmt.Fprintln(c.OutOrStdout(), id)
			return nil
		},
	}
	c.Flags().BoolVar(&includeRW, "include-rw", false, "also archive the --rw mounts (their whole contents; restored by fork or resume only into an empty directory)")
	c.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List snapshots",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			snaps, err := g.store().Snapshots()
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SNAPSHOT\tSANDBOX\tCREATED\tSIZE")
			for _, s := range snaps {
				var size int64
				for _, p := range s.Parts {
					size += p.Size
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, s.SandboxID, s.Created.Local().Format(time.DateTime), sandbox.FormatSize(size))
			}
			return tw.Flush()
		},
	}, &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			for _, ref := range args {
				snap, err := g.store().Snapshot(ref)
				if err != nil && !errors.Is(err, sandbox.ErrSnapshotCorrupt) {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				if snap == nil {
					continue
				}
				if err := os.RemoveAll(snap.Dir); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
			}
			return nil
		},
	})
	return c
}

func newForkCmd(g *globalOptions) *cobra.Command {
	var name string
	var labels []string
	c := &cobra.Command{
		Use:   "fork SNAPSHOT",
		Short: "Create a new, independent sandbox from a snapshot and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			snap, err := g.store().Snapshot(args[0])
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			flags := []string{"--from-snapshot", snap.Dir}
			if name != "" {
				flags = append(flags, "--name", name)
			}
			for _, l := range labels {
				flags = append(flags, "--label", l)
			}
			return g.startSupervisor(c, sandbox.NewID(), flags)
		},
	}
	c.Flags().StringVar(&name, "name", "", "a `NAME` for the new sandbox")
	c.Flags().StringArrayVar(&labels, "label", nil, "attach a `K=V` label (repeatable)")
	return c
}
