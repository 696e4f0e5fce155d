package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

func newCpCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox (ID:PATH on one side, - for stdin/stdout)",
		Long: `Copy one file between the host and a sandbox made by tent create, like
docker cp: ID:PATH names a path inside the sandbox (resolved in the
sandbox's own view, with its restrictions), the other side is a host
path or - for stdin/stdout. Directories are not copied: use tar through
tent exec.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			srcID, srcPath, srcIn := splitRef(src)
			dstID, dstPath, dstIn := splitRef(dst)
			if srcIn == dstIn {
				return &usageError{cmd: c.CommandPath(), err: errors.New("exactly one side must be ID:PATH")}
			}
			if srcIn {
				rec, err := g.lookup(srcID)
				if err != nil {
					return err
				}
				out := os.Stdout
				if dst != "-" {
					if out, err = os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
						return &exitError{code: exitRefused, msg: err.Error()}
					}
					defer out.Close()
				}
				devnull, _ := os.Open(os.DevNull)
				defer devnull.Close()
				if err := sandbox.RemoteFile(rec, "read", srcPath, nil, devnull, out); err != nil {
					return &exitError{code: 1, msg: err.Error()}
				}
				return nil
			}
			rec, err := g.lookup(dstID)
			if err != nil {
				return err
			}
			in, mode := os.Stdin, os.FileMode(0o644)
			if src != "-" {
				if in, err = os.Open(src); err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				defer in.Close()
				if fi, err := in.Stat(); err == nil {
					if fi.IsDir() {
						return &exitError{code: exitRefused, msg: src + " is a directory: tent cp copies files (use tar through tent exec)"}
					}
					mode = fi.Mode().Perm()
				}
			}
			devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			defer devnull.Close()
			if err := sandbox.RemoteFile(rec, "write", dstPath, []string{fmt.Sprintf("%o", mode)}, in, devnull); err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			return nil
		},
	}
}

// splitRef splits ID:PATH; a host path (or -) has no colon before its
// first slash.
func splitRef(s string) (id, path string, inside bool) {
	id, path, ok := strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/") {
		return "", s, false
	}
	return id, path, true
}
