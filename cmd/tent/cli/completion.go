package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newCompletionCmd is `tent completion bash|zsh|fish`: the shell's
// completion script for tent (cobra's), on stdout.
func newCompletionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print tent's completion script for a shell on stdout. To load it:

  bash:  source <(tent completion bash)
         (for every session: tent completion bash > /etc/bash_completion.d/tent)
  zsh:   tent completion zsh > "${fpath[1]}/_tent"   (then start a new shell)
  fish:  tent completion fish > ~/.config/fish/completions/tent.fish`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: func(c *cobra.Command, args []string) error {
			root, w := c.Root(), c.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			}
			return &usageError{cmd: c.CommandPath(), err: errors.New("want bash, zsh or fish, not " + args[0])}
		},
	}
}
