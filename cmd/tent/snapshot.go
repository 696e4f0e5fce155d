package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

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
				if err := validName(name); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				flags = append(flags, "--name", name)
			}
			for _, l := range labels {
				flags = append(flags, "--label", l)
			}
			return g.startSupervisor(c, sandbox.NewID(), name, flags)
		},
	}
	c.Flags().StringVar(&name, "name", "", "a `NAME` for the new sandbox")
	c.Flags().StringArrayVar(&labels, "label", nil, "attach a `K=V` label (repeatable)")
	return c
}
