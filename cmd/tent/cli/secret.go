package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox/policy"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// tent secret is the state directory's secret store (docs/secrets.md,
// "Where the values live"): the values the proxies of its sandboxes ask
// for each time a request goes out. A value never comes from the
// command line (argv is readable by every local user): set reads it from
// tent's environment, a --from-file of NAME=VALUE lines (mode 0600) or
// one line of stdin.

func newSecretCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "secret",
		Short: "Set, list or remove secrets' values: a change reaches the next request of every sandbox naming the secret",
		Long: `The values of the secrets that the sandboxes of this state directory name
(tent create --secret, --secret-file, policy files) live in one store
(the file "secrets" of the state directory, mode 0600). A sandbox holds
only a placeholder; tent's proxy asks the store each time a request to
a bound host goes out. So tent secret set is a rotation and tent secret
rm a revocation, in force from the next request of every sandbox that
names the secret: running, forked or resumed.`,
	}
	c.AddCommand(newSecretSetCmd(g), newSecretLsCmd(g), newSecretRmCmd(g))
	return c
}

func newSecretSetCmd(g *Globals) *cobra.Command {
	var fromFile string
	var stdin bool
	c := &cobra.Command{
		Use:   "set NAME [--from-file FILE | --stdin]",
		Short: "Give secret NAME a value: tent's variable NAME, a --from-file line NAME=VALUE, or one line of --stdin",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name := args[0]
			if fromFile != "" && stdin {
				return &exitError{code: exitRefused, msg: "--from-file and --stdin: give one"}
			}
			v, err := secretValue(name, fromFile, stdin, c.InOrStdin())
			if err != nil {
				return err
			}
			return g.backend().Secrets().Set(name, v)
		},
	}
	c.Flags().StringVar(&fromFile, "from-file", "", "read the value from `FILE`'s NAME=VALUE line (mode 0600, as --secret-file)")
	c.Flags().BoolVar(&stdin, "stdin", false, "read the value from the first line of stdin")
	return c
}

// secretValue is the value set gives secret name.
func secretValue(name, fromFile string, stdin bool, in io.Reader) (string, error) {
	switch {
	case fromFile != "":
		m, err := policy.ReadSecretFile(fromFile)
		if err != nil {
			return "", fmt.Errorf("--from-file: %w", err)
		}
		v, ok := m[name]
		if !ok {
			return "", &exitError{code: exitRefused, msg: fmt.Sprintf("--from-file %s has no line %s=VALUE", fromFile, name)}
		}
		return v, nil
	case stdin:
		// One line, bounded: a value is at most 16 KiB.
		r := bufio.NewReaderSize(io.LimitReader(in, 64<<10), 64<<10)
		line, err := r.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			return "", &exitError{code: exitRefused, msg: "--stdin: no value on the first line of stdin"}
		}
		return line, nil
	}
	v, ok := os.LookupEnv(name)
	if !ok {
		return "", &exitError{code: exitRefused, msg: fmt.Sprintf("tent's environment has no %s: export it, or give --from-file or --stdin", name)}
	}
	return v, nil
}

func newSecretLsCmd(g *Globals) *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the names of the secrets the store holds (never a value)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			names, err := g.backend().Secrets().List()
			if err != nil {
				return err
			}
			if names == nil {
				names = []string{}
			}
			w := c.OutOrStdout()
			return emit(&out, w, names, names, func() error {
				for _, n := range names {
					if _, err := fmt.Fprintln(w, n); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	out.register(c.Flags())
	return c
}

func newSecretRmCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove secrets' values (a revocation: from the next request on, the placeholder goes out as sent)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			st := g.backend().Secrets()
			var missing []string
			for _, n := range args {
				if err := secretstore.ValidName(n); err != nil {
					return err
				}
				ok, err := st.Delete(n)
				if err != nil {
					return err
				}
				if !ok {
					missing = append(missing, n)
				}
			}
			if len(missing) > 0 {
				return &exitError{code: exitMissing, msg: "no such secret: " + strings.Join(missing, ", ")}
			}
			return nil
		},
	}
}
