package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// newMountCmd is `tent mount ID --ro|--rw|--cow SRC[:DST]`: a mount added
// to a running sandbox, validated as at create and visible to the next
// exec (see sandbox.Sandbox.Mount).
func newMountCmd(g *Globals) *cobra.Command {
	var ro, rw, cow string
	c := &cobra.Command{
		Use:   "mount ID --ro|--rw|--cow SRC[:DST]",
		Short: "Add a mount to a running sandbox",
		Long: "Add a mount to a running sandbox. SRC is a host path (relative to the current directory);\n" +
			"DST, the path inside, defaults to SRC. The mount is checked as at create and is visible to\n" +
			"the commands started afterwards; a missing mount point is created (beneath another mount,\n" +
			"only where the sandbox itself could create it).",
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var set []string
			var value string
			var access sandbox.Access
			for _, f := range []struct {
				name string
				v    string
				a    sandbox.Access
			}{{"ro", ro, sandbox.ReadOnly}, {"rw", rw, sandbox.ReadWrite}, {"cow", cow, sandbox.CopyOnWrite}} {
				if c.Flags().Changed(f.name) {
					set = append(set, "--"+f.name)
					value, access = f.v, f.a
				}
			}
			if len(set) != 1 {
				return &exitError{code: exitRefused, msg: fmt.Sprintf("mount needs exactly one of --ro, --rw or --cow (got %d)", len(set))}
			}
			cwd, err := os.Getwd()
			if err != nil {
				return err
			}
			m, err := policy.ParseMount(value, access, cwd)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			if err := rec.sb.Mount(c.Context(), m); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&ro, "ro", "", "bind `SRC[:DST]` read-only")
	c.Flags().StringVar(&rw, "rw", "", "bind `SRC[:DST]` read-write")
	c.Flags().StringVar(&cow, "cow", "", "overlay `SRC[:DST]` copy-on-write")
	return c
}
