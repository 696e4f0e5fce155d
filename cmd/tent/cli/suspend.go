package cli

import (
	"github.com/spf13/cobra"
)

func newSuspendCmd(g *Globals, suspend bool) *cobra.Command {
	use, short := "suspend ID", "Freeze every process of a sandbox (cgroup freezer)"
	if !suspend {
		use, short = "resume ID", "Thaw a suspended sandbox; bring a stopped one back from its latest snapshot"
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
			if suspend {
				err = rec.sb.Suspend(c.Context())
			} else {
				_, err = rec.sb.Resume(c.Context())
			}
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
}
