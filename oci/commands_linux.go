package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
	"github.com/tent-sandbox/tent/sandbox/supervised"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// run dispatches one runc command.
func run(ctx context.Context, g *globals, cmd string, args []string) (int, error) {
	switch cmd {
	case "create":
		return 0, g.create(ctx, args)
	case "start", "pause", "resume":
		return 0, g.simple(ctx, cmd, args)
	case "state":
		return 0, g.state(ctx, args)
	case "kill":
		return 0, g.kill(ctx, args)
	case "delete":
		return 0, g.delete(ctx, args)
	case "exec":
		return g.exec(ctx, args)
	case "ps":
		return 0, g.ps(ctx, args)
	case "update":
		return 0, g.update(ctx, args)
	case "features":
		return 0, g.features()
	case "list":
		return 0, g.list(ctx, args)
	case "checkpoint", "restore", "run", "spec", "events", "init":
		return 1, fmt.Errorf("%s: %w (tent-runc implements create, start, state, kill, delete, exec, ps, pause, resume, update, features, list)", cmd, ErrUnsupportedCommand)
	}
	return 1, fmt.Errorf("unknown command %q", cmd)
}

// simple runs start, pause or resume.
func (g *globals) simple(ctx context.Context, name string, args []string) error {
	fl, err := commandFlags(name, g, args, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	id, err := oneID(name, fl.Args())
	if err != nil {
		return err
	}
	c, err := openContainer(ctx, rootOf(g), id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	st := c.status(ctx)
	want := map[string]string{"start": statusCreated, "pause": statusRunning, "resume": statusPaused}[name]
	switch {
	case st == statusStopped:
		return fmt.Errorf("%s: container %s is stopped", name, id)
	case st != want:
		return fmt.Errorf("cannot %s a container that is %s", name, st)
	case name == "start":
		return c.sb.StartMain(ctx)
	case name == "pause":
		return c.sb.Suspend(ctx)
	}
	_, err = c.sb.Resume(ctx)
	return err
}

// stateJSON is runc's `state` output.
type stateJSON struct {
	OCIVersion  string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// stateOf is runc's state of c.
func stateOf(ctx context.Context, c *container) stateJSON {
	rec := c.rec
	st := stateJSON{OCIVersion: specs.Version, ID: rec.ID, Pid: rec.Pid, Status: c.status(ctx), Bundle: rec.Bundle,
		Rootfs: rec.Rootfs, Created: rec.Created, Owner: rec.Owner, Annotations: rec.Annotations}
	if st.Status == statusStopped {
		st.Pid = 0
	}
	return st
}

func (g *globals) state(ctx context.Context, args []string) error {
	id, err := oneID("state", args)
	if err != nil {
		return err
	}
	c, err := openContainer(ctx, rootOf(g), id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, _ := json.MarshalIndent(stateOf(ctx, c), "", "  ")
	_, err = fmt.Fprintf(g.stdout, "%s\n", out)
	return err
}

func (g *globals) kill(ctx context.Context, args []string) error {
	var all bool
	fl, err := commandFlags("kill", g, args, func(fl *flag.FlagSet) {
		fl.BoolVar(&all, "all", false, "")
		fl.BoolVar(&all, "a", false, "")
	})
	if err != nil {
		return err
	}
	rest := fl.Args()
	if len(rest) == 1 {
		rest = append(rest, "SIGTERM")
	}
	if len(rest) != 2 {
		return errors.New("kill: want ID [SIGNAL]")
	}
	id := rest[0]
	sig, err := policy.ParseSignal(rest[1])
	if err != nil {
		return err
	}
	c, err := openContainer(ctx, rootOf(g), id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	switch st := c.status(ctx); {
	case st == statusStopped:
		return errors.New("container not running")
	case st == statusCreated:
		// Nothing of the bundle's runs yet: any signal ends it.
		err = c.sb.SignalMain(ctx, sig)
	case sig == syscall.SIGKILL && all:
		err = c.sb.Stop(ctx) // the whole sandbox
	default:
		if all {
			c.signalAll(sig)
		}
		err = c.sb.SignalMain(ctx, sig)
	}
	if errors.Is(err, supervised.ErrNoProcess) || errors.Is(err, sandbox.ErrStopped) {
		return errors.New("container not running")
	}
	return err
}

func (g *globals) delete(ctx context.Context, args []string) error {
	var force bool
	fl, err := commandFlags("delete", g, args, func(fl *flag.FlagSet) {
		fl.BoolVar(&force, "force", false, "")
		fl.BoolVar(&force, "f", false, "")
	})
	if err != nil {
		return err
	}
	id, err := oneID("delete", fl.Args())
	if err != nil {
		return err
	}
	root := rootOf(g)
	c, err := openContainer(ctx, root, id)
	if errors.Is(err, ErrNotExist) || errors.Is(err, sandbox.ErrNotFound) {
		if force {
			// A container already gone (its directory too, or never
			// fully made): nothing to do.
			return os.RemoveAll(containerDir(root, id))
		}
		return err
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if c.alive(ctx) {
		st := c.status(ctx)
		if st != statusCreated && st != statusStopped && !force {
			return fmt.Errorf("cannot delete container %s that is not stopped: %s", id, st)
		}
	}
	// Ends the sandbox if it runs, and reclaims what it left (the
	// cgroups made for linux.cgroupsPath too, once its supervisor is
	// gone).
	if err := c.sb.Terminate(ctx); err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	return os.RemoveAll(containerDir(root, id))
}

// rootOf is the absolute --root.
func rootOf(g *globals) string {
	abs, err := filepath.Abs(g.root)
	if err != nil {
		return g.root
	}
	return abs
}

func (g *globals) ps(ctx context.Context, args []string) error {
	var format string
	fl, err := commandFlags("ps", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&format, "format", "table", "")
		fl.StringVar(&format, "f", "table", "")
	})
	if err != nil {
		return err
	}
	id, err := oneID("ps", fl.Args())
	if err != nil {
		return err
	}
	c, err := openContainer(ctx, rootOf(g), id)
	if err != nil {
		return err
	}
	pids := []int{}
	if c.alive(ctx) {
		p, err := c.pids()
		if err != nil {
			return err
		}
		pids = append(pids, p...)
	}
	switch format {
	case "json":
		return json.NewEncoder(g.stdout).Encode(pids)
	case "table":
		w := bufio.NewWriter(g.stdout)
		fmt.Fprintln(w, "PID")
		for _, p := range pids {
			fmt.Fprintln(w, p)
		}
		return w.Flush()
	}
	return fmt.Errorf("ps: --format %q: want table or json", format)
}

// update is runc's update --resources: the container's memory, pids
// and CPU limits change live (Handle.SetLimits); weights and shares are
// left to the host, as at create. A limit tent cannot apply live, or
// lifting one (-1), is refused and nothing changes.
func (g *globals) update(ctx context.Context, args []string) error {
	var resources string
	fl, err := commandFlags("update", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&resources, "resources", "", "")
		fl.StringVar(&resources, "r", "", "")
	})
	if err != nil {
		return fmt.Errorf("update: only --resources is read: %w", err)
	}
	id, err := oneID("update", fl.Args())
	if err != nil {
		return err
	}
	c, err := openContainer(ctx, rootOf(g), id)
	if err != nil {
		return err
	}
	// What was sent: the shim writes it to stdin.
	var in io.Reader = g.stdin
	if resources != "" && resources != "-" {
		f, err := os.Open(resources)
		if err != nil {
			return fmt.Errorf("update: --resources: %w", err)
		}
		defer f.Close()
		in = f
	}
	if in == nil {
		return errors.New("update: --resources: nothing to read")
	}
	var r specs.LinuxResources
	if err := json.NewDecoder(io.LimitReader(in, maxConfig)).Decode(&r); err != nil {
		return fmt.Errorf("update: --resources: %w", err)
	}
	if lifts(&r) {
		return fmt.Errorf("update: %w: lifting a limit (-1): a container's limits can be changed, not removed", ErrUnsupportedCommand)
	}
	l := limitsOf(&r)
	if l == (sandbox.Limits{}) {
		return nil // nothing tent enforces
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if err := c.sb.SetLimits(ctx, l); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// lifts reports whether r removes a limit (-1: unlimited).
func lifts(r *specs.LinuxResources) bool {
	return r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit < 0 ||
		r.Pids != nil && r.Pids.Limit < 0 ||
		r.CPU != nil && r.CPU.Quota != nil && *r.CPU.Quota < 0
}

func (g *globals) list(ctx context.Context, args []string) error {
	var format string
	var quiet bool
	if _, err := commandFlags("list", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&format, "format", "table", "")
		fl.StringVar(&format, "f", "table", "")
		fl.BoolVar(&quiet, "quiet", false, "")
		fl.BoolVar(&quiet, "q", false, "")
	}); err != nil {
		return err
	}
	root := rootOf(g)
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	states := []stateJSON{}
	for _, e := range entries {
		c, err := openContainer(ctx, root, e.Name())
		if err != nil {
			continue
		}
		states = append(states, stateOf(ctx, c))
	}
	switch {
	case quiet:
		for _, s := range states {
			fmt.Fprintln(g.stdout, s.ID)
		}
		return nil
	case format == "json":
		return json.NewEncoder(g.stdout).Encode(states)
	case format == "table":
		w := tabwriter.NewWriter(g.stdout, 12, 1, 3, ' ', 0)
		fmt.Fprintln(w, "ID\tPID\tSTATUS\tBUNDLE\tCREATED\tOWNER")
		for _, s := range states {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Pid, s.Status, s.Bundle, s.Created.Format(time.RFC3339Nano), s.Owner)
		}
		return w.Flush()
	}
	return fmt.Errorf("list: --format %q: want table or json", format)
}
