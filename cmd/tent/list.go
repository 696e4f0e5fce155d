package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

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
