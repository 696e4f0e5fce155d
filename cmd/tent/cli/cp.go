package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox/policy"
	// Named xfer: the package's tests have a transfer of their own.
	xfer "github.com/tent-sandbox/tent/sandbox/transfer"
)

type cpOptions struct {
	follow  bool
	maxSize string
}

func newCpCmd(g *Globals) *cobra.Command {
	o := &cpOptions{}
	c := &cobra.Command{
		Use:   "cp [-L] SRC DST",
		Short: "Copy files and directories into or out of a sandbox (ID:PATH on one side, - for stdin/stdout)",
		Long: `Copy between the host and a sandbox made by tent create, as docker cp
does: ID:PATH names a path inside the sandbox (resolved in the sandbox's
own view, with its restrictions), the other side is a host path or -.

  - A file is copied to DST, or into DST when DST is an existing
    directory; a DST ending in / must be an existing directory.
  - A directory is copied recursively to DST when DST does not exist, or
    into DST (as DST/NAME) when it is an existing directory. Only
    directories, regular files and symlinks are copied; symlinks are
    copied as links, never followed (-L follows SRC itself when it is
    one); permission bits are kept, set-id bits never.
  - Out of a sandbox, everything is written beneath the destination's
    directory, which tent holds open: first under a temporary name beside
    DST, renamed into place only once the whole copy succeeded. A failed
    copy leaves DST as it was; an existing directory is never merged into
    (tent cp refuses it). At most --max-size bytes of file data come out.
  - With DST -, a file's contents go to stdout, a directory as a tar
    archive; with SRC -, stdin is written to the file ID:PATH.

Exit status: 0 on success, 125 when the copy failed or was refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			srcID, srcPath, srcIn := splitRef(src)
			dstID, dstPath, dstIn := splitRef(dst)
			if srcIn == dstIn {
				return &usageError{cmd: c.CommandPath(), err: errors.New("exactly one side must be ID:PATH")}
			}
			limit, err := policy.ParseSize(o.maxSize)
			if err != nil {
				return &exitError{code: exitRefused, msg: fmt.Sprintf("--max-size %q: %v", o.maxSize, err)}
			}
			ref := dstID
			if srcIn {
				ref = srcID
			}
			rec, err := g.lookup(ref)
			if err != nil {
				return err
			}
			ctx := c.Context()
			opts := xfer.Options{FollowLink: o.follow, MaxSize: limit}
			switch {
			case srcIn && dst == "-":
				err = xfer.CopyOutTo(ctx, rec.sb, srcPath, c.OutOrStdout(), opts)
			case srcIn:
				err = xfer.CopyOut(ctx, rec.sb, srcPath, dst, opts)
			case src == "-":
				err = xfer.CopyInFrom(ctx, rec.sb, os.Stdin, dstPath)
			default:
				err = xfer.CopyIn(ctx, rec.sb, src, dstPath)
			}
			if err != nil {
				return &exitError{code: exitRefused, msg: cpMessage(err)}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&o.follow, "follow-link", "L", false, "follow SRC when it is a symlink")
	c.Flags().StringVar(&o.maxSize, "max-size", "8G", "stop a copy out of a sandbox after `SIZE` bytes of file data")
	return c
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

// cpMessage words a failed copy as tent cp says it, naming its flags.
func cpMessage(err error) string {
	var te *xfer.TypeError
	var ee *xfer.ExistsError
	switch {
	case errors.As(err, &te) && te.Mode&os.ModeSymlink != 0:
		return fmt.Sprintf("%s is a symlink (to %q): nothing to write to stdout (-L follows it)", te.Path, te.Link)
	case errors.As(err, &te):
		return fmt.Sprintf("%s is a %s: tent cp copies regular files, directories and symlinks", te.Path, te.TypeName())
	case errors.As(err, &ee) && ee.Meanwhile:
		return ee.Path + " appeared meanwhile: tent cp does not merge directories"
	case errors.As(err, &ee):
		return ee.Path + " exists: tent cp does not merge directories (remove it, or copy into another directory)"
	case errors.Is(err, xfer.ErrTooLarge):
		return err.Error() + " (see --max-size)"
	}
	return err.Error()
}
