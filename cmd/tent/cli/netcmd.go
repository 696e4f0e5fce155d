package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// netView is a sandbox's network policy as tent net prints it.
type netView struct {
	ID           string   `json:"id"`
	Mode         string   `json:"mode"`
	AllowedHosts []string `json:"allowed_hosts"`
	DeniedHosts  []string `json:"denied_hosts"`
}

func newNetCmd(g *Globals) *cobra.Command {
	var mode string
	var allow, deny []string
	var out outputFlags
	c := &cobra.Command{
		Use:   "net ID [--net none|limited] [--allow-host P]... [--deny-host P]...",
		Short: "Print a sandbox's network policy, or replace its rules",
		Long: `With no rule flags, print the sandbox's current network policy (its mode
and host rules; -o json, --format). With --net, --allow-host or
--deny-host, replace the rules of a running sandbox: --allow-host and
--deny-host imply --net limited, and --net none drops every rule. A
sandbox created with --net host keeps the host's network.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			f := c.Flags()
			if !f.Changed("net") && !f.Changed("allow-host") && !f.Changed("deny-host") {
				p := rec.Spec.Network
				v := netView{ID: rec.ID, Mode: string(p.Mode), AllowedHosts: p.AllowedHosts, DeniedHosts: p.DeniedHosts}
				if v.Mode == "" {
					v.Mode = "none"
				}
				if v.AllowedHosts == nil {
					v.AllowedHosts = []string{}
				}
				if v.DeniedHosts == nil {
					v.DeniedHosts = []string{}
				}
				w := c.OutOrStdout()
				return emit(&out, w, v, []netView{v}, func() error { return v.writeText(w) })
			}
			if out.output != "" || out.format != "" {
				return &exitError{code: exitRefused, msg: "-o and --format print the policy: give them without rule flags"}
			}
			p := sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: allow, DeniedHosts: deny}
			if f.Changed("net") {
				if p.Mode, err = policy.ParseNet(mode); err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--net: %v", err)}
				}
			}
			if err := p.Validate(); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			for _, s := range rec.Spec.Network.Secrets {
				if s.Header != "" {
					// Header transforms are rules, which a new policy
					// replaces, and their values are not in the record
					// this command has: it would drop them.
					return &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s has header transforms (%s for %s), set through tent serve (E2B's network rules): change its rules there (updateNetwork), where their values are", rec.ID, s.Header, strings.Join(s.Hosts, ","))}
				}
			}
			if err := rec.sb.SetNetworkPolicy(c.Context(), p); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&mode, "net", "limited", "`none` (deny everything) or limited")
	c.Flags().StringArrayVar(&allow, "allow-host", nil, "allow `PATTERN` (repeatable)")
	c.Flags().StringArrayVar(&deny, "deny-host", nil, "deny `PATTERN` (repeatable)")
	out.register(c.Flags())
	return c
}

// writeText prints the policy as the flags that set it.
func (v netView) writeText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "net: %s\n", v.Mode); err != nil {
		return err
	}
	for _, h := range v.AllowedHosts {
		fmt.Fprintf(w, "allow-host: %s\n", h)
	}
	for _, h := range v.DeniedHosts {
		fmt.Fprintf(w, "deny-host: %s\n", h)
	}
	return nil
}
