package cli

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox/supervised"
)

func newLsCmd(g *Globals) *cobra.Command {
	var out outputFlags
	var quiet, showEnv bool
	var filters []string
	c := &cobra.Command{
		Use:   "ls [-q] [-o table|json] [--format TEMPLATE] [--filter K=V]...",
		Short: "List sandboxes (stopped ones too, with why they stopped, until tent rm)",
		Long: `List the sandboxes of the state directory, oldest first: running,
suspended and stopped ones (a sandbox whose --timeout ran out, or whose
supervisor died, stays listed as stopped, with the reason, until tent rm).
A sandbox whose record cannot be read (cut short, garbage, not a file) is
listed last as broken, with the record's file and the error (-o json:
"state": "broken", "record", "error"); tent rm ID removes it, and the
sandbox with it if its supervisor still runs.

--filter keeps the sandboxes that match every filter given:
  label=K=V   the label K has the value V     label=K   has the label K
  name=NAME   the name is NAME                state=S   running, suspended, stopped or broken
  id=PREFIX   the id starts with PREFIX

--format applies a Go template to each sandbox's record (the fields of
tent inspect, by their Go names: {{.ID}}, {{.Name}}, {{.State}},
{{.Labels}}, {{.Created}}, {{.Reason}}; a broken record's {{.Record}} and
{{.Error}}); {{json .}} prints it as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			match, err := parseFilters(filters)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			all, err := g.list()
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			recs := []*sandboxView{}
			for _, r := range all {
				if match(r) {
					if !showEnv {
						r = redactEnv(r)
					}
					recs = append(recs, r)
				}
			}
			w := c.OutOrStdout()
			if quiet {
				for _, r := range recs {
					fmt.Fprintln(w, r.ID)
				}
				return nil
			}
			return emit(&out, w, recs, recs, func() error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCREATED\tLABELS")
				now := time.Now()
				for _, r := range recs {
					var labels []string
					for k, v := range r.Labels {
						labels = append(labels, k+"="+v)
					}
					sort.Strings(labels)
					state, age := string(r.State), ""
					switch {
					case r.State == stateBroken:
						state += " (" + r.Record + ": " + r.Error + ")"
					case r.Reason != "":
						state += " (" + r.Reason + ")"
					}
					if !r.Created.IsZero() {
						age = humanAge(r.Created, now)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, state, age, strings.Join(labels, ","))
				}
				return tw.Flush()
			})
		},
	}
	out.register(c.Flags())
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	c.Flags().StringArrayVarP(&filters, "filter", "f", nil, "keep sandboxes that match `K=V`: label=K=V, label=K, name=NAME, state=STATE, id=PREFIX (repeatable: all must match)")
	c.Flags().BoolVar(&showEnv, "show-env", false, "with -o json or --format, print environment values (default: names only)")
	return c
}

// parseFilters reads ls --filter values into one predicate (all must
// match).
func parseFilters(fs []string) (func(*sandboxView) bool, error) {
	var preds []func(*sandboxView) bool
	for _, f := range fs {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("--filter %q: want K=V (label=K=V, name=NAME, state=STATE, id=PREFIX)", f)
		}
		switch k {
		case "label":
			lk, lv, withValue := strings.Cut(v, "=")
			preds = append(preds, func(r *sandboxView) bool {
				got, ok := r.Labels[lk]
				return ok && (!withValue || got == lv)
			})
		case "name":
			preds = append(preds, func(r *sandboxView) bool { return r.Name == v })
		case "state":
			switch v {
			case "running", "suspended", "stopped", string(stateBroken):
			default:
				return nil, fmt.Errorf("--filter %q: want state=running, suspended, stopped or broken", f)
			}
			preds = append(preds, func(r *sandboxView) bool { return string(r.State) == v })
		case "id":
			preds = append(preds, func(r *sandboxView) bool { return strings.HasPrefix(r.ID, v) })
		default:
			return nil, fmt.Errorf("--filter %q: unknown filter %q (want label, name, state or id)", f, k)
		}
	}
	return func(r *sandboxView) bool {
		for _, p := range preds {
			if !p(r) {
				return false
			}
		}
		return true
	}, nil
}

func newInspectCmd(g *Globals) *cobra.Command {
	var out outputFlags
	var showEnv bool
	c := &cobra.Command{
		Use:   "inspect [-o json] [--format TEMPLATE] ID...",
		Short: "Print sandboxes' records as JSON (environment variables by name only, unless --show-env)",
		Long: `Print the record of each sandbox named: one JSON object for one sandbox,
a JSON array for several (-o json, the default; -o table is the same), or
--format's Go template applied to each record ({{.Spec.Limits.Memory}},
{{.State}}, {{json .Spec}}).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			var recs []*sandboxView
			for _, ref := range args {
				rec, err := g.lookup(ref)
				if err != nil {
					return err
				}
				if !showEnv {
					rec = redactEnv(rec)
				}
				recs = append(recs, rec)
			}
			var all any = recs
			if len(recs) == 1 {
				all = recs[0]
			}
			if out.format == "" {
				out.output = "json"
			}
			return emit(&out, c.OutOrStdout(), all, recs, nil)
		},
	}
	out.register(c.Flags())
	c.Flags().BoolVar(&showEnv, "show-env", false, "print environment values too (default: names only)")
	return c
}

func newRmCmd(g *Globals) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "rm ID... | --all",
		Short: "Terminate sandboxes and remove them (a broken record too)",
		RunE: func(c *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return &usageError{cmd: c.CommandPath(), err: errors.New("give sandbox ids or --all")}
			}
			var recs []*sandboxView
			if all {
				list, err := g.list()
				if err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				recs = list
			}
			for _, ref := range args {
				rec, err := g.lookup(ref)
				if re := (*supervised.RecordError)(nil); errors.As(err, &re) {
					rec = brokenView(re) // its Terminate removes it
				} else if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			var failed []string
			for _, rec := range recs {
				sb := rec.sb
				if sb == nil { // listed, not looked up
					var err error
					if sb, err = g.backend().Sandbox(c.Context(), rec.ID); err != nil {
						failed = append(failed, err.Error())
						continue
					}
				}
				if err := sb.Terminate(c.Context()); err != nil {
					failed = append(failed, err.Error())
				}
			}
			if all {
				// What creates killed before their sandbox was saved left.
				if err := g.backend().Sweep(c.Context()); err != nil {
					failed = append(failed, err.Error())
				}
			}
			if len(failed) > 0 {
				return &exitError{code: exitRefused, msg: strings.Join(failed, "\n")}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&all, "all", false, "remove every sandbox (those with a broken record too) and what creates killed early left")
	return c
}
