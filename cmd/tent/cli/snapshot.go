package cli

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

func newSnapshotCmd(g *Globals) *cobra.Command {
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
			stop := progress("snapshotting " + rec.ID)
			snap, err := rec.sb.SnapshotWith(c.Context(), sandbox.SnapshotOptions{IncludeReadWrite: includeRW})
			stop()
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			fmt.Fprintln(c.OutOrStdout(), snap.ID)
			return nil
		},
	}
	c.Flags().BoolVar(&includeRW, "include-rw", false, "also archive the --rw mounts (their whole contents; restored by fork or resume only into an empty directory)")
	c.AddCommand(newSnapshotLsCmd(g), &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			for _, ref := range args {
				snap, err := sandbox.FindSnapshot(g.backend().SnapshotsDir(), ref)
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

func newForkCmd(g *Globals) *cobra.Command {
	var name string
	var labels []string
	c := &cobra.Command{
		Use:   "fork SNAPSHOT",
		Short: "Create a new, independent sandbox from a snapshot and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			lbls, err := parseLabels(labels)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			stop := progress("forking " + args[0])
			info, err := g.backend().Fork(c.Context(), args[0], sandbox.ForkOverrides{Name: name, Labels: lbls})
			stop()
			if err != nil {
				return refused(err)
			}
			fmt.Fprintln(c.OutOrStdout(), info.ID)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "a `NAME` for the new sandbox")
	c.Flags().StringArrayVar(&labels, "label", nil, "attach a `K=V` label (repeatable)")
	return c
}

// snapshotView is a snapshot as tent snapshot ls prints it.
type snapshotView struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Created   time.Time `json:"created"`
	// Size is the bytes of its compressed parts.
	Size int64  `json:"size"`
	Dir  string `json:"dir"`
}

func newSnapshotLsCmd(g *Globals) *cobra.Command {
	var out outputFlags
	var quiet bool
	c := &cobra.Command{
		Use:   "ls [-q] [-o table|json] [--format TEMPLATE]",
		Short: "List snapshots",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			snaps, err := g.backend().Snapshots(c.Context())
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			views := []snapshotView{}
			for _, s := range snaps {
				v := snapshotView{ID: s.ID, SandboxID: s.SandboxID, Created: s.Created, Dir: s.Dir}
				for _, p := range s.Parts {
					v.Size += p.Size
				}
				views = append(views, v)
			}
			w := c.OutOrStdout()
			if quiet {
				for _, v := range views {
					fmt.Fprintln(w, v.ID)
				}
				return nil
			}
			return emit(&out, w, views, views, func() error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SNAPSHOT\tSANDBOX\tCREATED\tSIZE")
				now := time.Now()
				for _, v := range views {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, v.SandboxID, humanAge(v.Created, now), humanSize(v.Size))
				}
				return tw.Flush()
			})
		},
	}
	out.register(c.Flags())
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print snapshot ids only")
	return c
}
