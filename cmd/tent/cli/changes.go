package cli

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// layer picks the cow mount a diff or export is about.
func layer(rec *sandboxView, target string) ([]sandbox.CowLayer, error) {
	if len(rec.Layers) == 0 {
		return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s has no cow mount (create it with --cow SRC[:DST])", rec.ID)}
	}
	if target == "" {
		return rec.Layers, nil
	}
	for _, l := range rec.Layers {
		if l.Target == target {
			return []sandbox.CowLayer{l}, nil
		}
	}
	return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s has no cow mount at %s", rec.ID, target)}
}

// changeView is one changed path as tent diff -o json prints it.
type changeView struct {
	// Kind is added, modified or deleted.
	Kind string `json:"kind"`
	// Path is the path inside the sandbox, as the sandbox named it.
	Path string `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
	// Mount is the target of the cow mount it belongs to.
	Mount string `json:"mount"`
	// GitControl marks a git hook, config or commondir (see
	// layer.Change): once exported, git on the host runs what it says.
	GitControl bool `json:"git_control,omitempty"`
}

// warnGitControl writes a warning to w naming each change to a git
// control file, which git on the host would run once exported.
func warnGitControl(w io.Writer, views []changeView) {
	var flagged []string
	for _, v := range views {
		if v.GitControl {
			flagged = append(flagged, fmt.Sprintf("%c %s", strings.ToUpper(v.Kind)[0], policy.QuotePath(v.Path)))
		}
	}
	if len(flagged) > 0 {
		fmt.Fprintf(w, "tent: warning: the sandbox changed git hooks or config; git on the host runs them once exported, so review them first:\n  %s\n", strings.Join(flagged, "\n  "))
	}
}

// changeViews lists the changes of layers as tent diff shows them.
func changeViews(layers []sandbox.CowLayer) ([]changeView, error) {
	views := []changeView{}
	for _, l := range layers {
		changes, err := l.Diff()
		if err != nil {
			return nil, err
		}
		for _, ch := range changes {
			views = append(views, changeView{Kind: string(ch.Kind), Path: path.Join(l.Target, ch.Path), Dir: ch.Dir, Mount: l.Target, GitControl: ch.GitControl})
		}
	}
	return views, nil
}

func newDiffCmd(g *Globals) *cobra.Command {
	var mount string
	var out outputFlags
	c := &cobra.Command{
		Use:   "diff ID",
		Short: "List the files a sandbox added (A), modified (M) and deleted (D) in its cow mounts",
		Long: `List the files a sandbox added (A), modified (M) and deleted (D) in its cow
mounts, one per line. Names are the sandbox's: in the table, a name
holding control or non-ASCII bytes is quoted as git quotes it; -o json
prints them as JSON strings. Changes to git hooks, config or commondir
(which git on the host runs once exported) are also named in a warning
on stderr, and marked "git_control" in -o json.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			layers, err := layer(rec, mount)
			if err != nil {
				return err
			}
			views, err := changeViews(layers)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			warnGitControl(c.ErrOrStderr(), views)
			w := c.OutOrStdout()
			return emit(&out, w, views, views, func() error {
				for _, v := range views {
					// Names are the sandbox's: quoted where they hold
					// control bytes (a newline would forge a line, an
					// escape sequence reach the terminal).
					if _, err := fmt.Fprintf(w, "%c %s\n", strings.ToUpper(v.Kind)[0], policy.QuotePath(v.Path)); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&mount, "mount", "", "only the cow mount at `TARGET`")
	out.register(c.Flags())
	return c
}

func newExportCmd(g *Globals) *cobra.Command {
	var mount, to string
	var patch bool
	c := &cobra.Command{
		Use:   "export ID --patch | --to DIR",
		Short: "Export a sandbox's changes to a cow mount: a unified diff for patch -p1 / git apply, or applied onto a directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if patch == (to != "") {
				return &usageError{cmd: c.CommandPath(), err: errors.New("give exactly one of --patch and --to DIR")}
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			layers, err := layer(rec, mount)
			if err != nil {
				return err
			}
			if len(layers) > 1 {
				var targets []string
				for _, l := range layers {
					targets = append(targets, l.Target)
				}
				return &exitError{code: exitRefused, msg: "several cow mounts: choose one with --mount (" + strings.Join(targets, ", ") + ")"}
			}
			if !patch {
				// A patch leaves .git out (and says so); --to copies it.
				views, err := changeViews(layers)
				if err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				warnGitControl(c.ErrOrStderr(), views)
			}
			stop := progress("exporting " + rec.ID)
			if patch {
				err = layers[0].WritePatch(c.OutOrStdout())
			} else {
				err = layers[0].ExportTo(to)
			}
			stop()
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&patch, "patch", false, "print a unified diff that patch -p1 or git apply applies in the mount's source directory")
	c.Flags().StringVar(&to, "to", "", "apply the changes onto `DIR`")
	c.Flags().StringVar(&mount, "mount", "", "the cow mount at `TARGET` (needed when there are several)")
	return c
}
