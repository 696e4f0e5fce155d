package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// newMountCmd is `tent mount ID --ro|--rw|--cow SRC[:DST]`: a mount added
// to a running sandbox, validated as at create and visible to the next
// exec (see sandbox.Sandbox.Attach).
func newMountCmd(g *globalOptions) *cobra.Command {
	var ro, rw, cow string
	c := &cobra.Command{
		Use:   "mount ID --ro|--rw|--cow SRC[:DST]",
		Short: "Add a mount to a running sandbox",
		Long: "Add a mount to a running sandbox. SRC is a host path (relative to the current directory);\n" +
			"DST, the path inside, defaults to SRC. The mount is checked as at create and is visible to\n" +
			"the commands started afterwards; a missing mount point is created on the sandbox's root.",
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
			b := g.backend()
			makeMountpoint(c.Context(), b, rec.ID, m)
			if err := b.Mount(c.Context(), rec.ID, m); err != nil {
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

// makeMountpoint creates a missing mount point for m where the sandbox
// itself may create it: tent create makes the mount points of its mounts
// wherever they are, but an attach creates them only on the sandbox's
// root, so a default target beneath /tmp, $HOME or another writable
// mount (tent mount ID --ro ./data, run from a directory under /tmp) was
// refused though tent create --ro ./data took it. The file helper
// creates it with the sandbox's own rights (a directory, or an empty
// file for a file source); where it cannot, the attach says why. The
// attach then opens the mount point without following symlinks, so one
// that the sandbox swaps for a symlink meanwhile is refused.
func makeMountpoint(ctx context.Context, b sandbox.Backend, id string, m sandbox.Mount) {
	if err := b.File(ctx, id, sandbox.FileRequest{Op: sandbox.FileStat, Path: m.Target}); !errors.Is(err, os.ErrNotExist) {
		return
	}
	dir, entry := m.Target, ""
	if fi, err := os.Stat(m.Source); err == nil && !fi.IsDir() {
		dir, entry = path.Dir(m.Target), path.Base(m.Target)
	}
	// The helper's untar creates dir (and its parents) and extracts into
	// it an empty archive, or one empty file.
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	if entry != "" {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: entry, Mode: 0o644}); err != nil {
			return
		}
	}
	if err := tw.Close(); err != nil {
		return
	}
	_ = b.File(ctx, id, sandbox.FileRequest{Op: sandbox.FileUntar, Path: dir, In: &archive})
}
