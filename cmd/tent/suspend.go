package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

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
	return g.startSupervisor(c, rec.ID, rec.Name, flags)
}
