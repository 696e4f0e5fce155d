package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
			if c.Flags().Changed("report") {
				// The report of tent run describes one command; a
				// long-lived sandbox's is tent inspect (and its exec
				// results come back from each tent exec).
				return &exitError{code: exitRefused, msg: "--report is tent run's (one command's report); for a sandbox made by tent create, see tent inspect ID -o json"}
			}
			if err := validName(o.name); c.Flags().Changed("name") && err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
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
			return g.startSupervisor(c, sandbox.NewID(), o.name, argsAfter(os.Args, "create"))
		},
	}
	o.register(c.Flags())
	_ = c.Flags().MarkHidden("report")
	return c
}

// validName checks a --name: letters, digits, '_', '.' and '-', starting
// with a letter or digit (as docker's container names), at most 128
// bytes, and not shaped like a sandbox id (16 hex digits), which would
// shadow one.
func validName(name string) error {
	ok := name != "" && len(name) <= 128
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '_' || r == '.' || r == '-'):
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("--name %q: want letters, digits, '_', '.' or '-', starting with a letter or digit (at most 128)", name)
	}
	if isHex := strings.Trim(name, "0123456789abcdef") == ""; isHex && len(name) == 16 {
		return fmt.Errorf("--name %q: has the shape of a sandbox id (16 hex digits); choose another name", name)
	}
	return nil
}

// startSupervisor re-executes tent as the sandbox's supervisor, in its own
// session, and waits until the sandbox is ready. A name (not "") must be
// free in the state directory, but for the sandbox id itself (resume
// brings a stopped sandbox back under its id and name): the names lock is
// held from that check until the new record is saved.
func (g *globalOptions) startSupervisor(c *cobra.Command, id, name string, flags []string) error {
	store := g.store()
	if err := os.MkdirAll(store.Dir, 0o700); err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("state directory: %v", err)}
	}
	if name != "" {
		unlock, err := store.LockNames()
		if err != nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("state directory: %v", err)}
		}
		defer unlock()
		other, err := store.NameInUse(name)
		if err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		if other != nil && other.ID != id {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("the name %q is already used by sandbox %s (%s): choose another name, or tent rm %s", name, other.ID, other.State, other.ID)}
		}
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
