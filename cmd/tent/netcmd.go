package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

func newNetCmd(g *globalOptions) *cobra.Command {
	var mode string
	var allow, deny []string
	c := &cobra.Command{
		Use:   "net ID [--net none|limited] [--allow-host P]... [--deny-host P]...",
		Short: "Replace a running sandbox's network rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			p := sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: allow, DeniedHosts: deny}
			if c.Flags().Changed("net") {
				if p.Mode, err = sandbox.ParseNet(mode); err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("--net: %v", err)}
				}
			}
			if err := p.Validate(); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			if err := sandbox.RemoteSetNetworkPolicy(rec, p); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&mode, "net", "limited", "`none` (deny everything) or limited")
	c.Flags().StringArrayVar(&allow, "allow-host", nil, "allow `PATTERN` (repeatable)")
	c.Flags().StringArrayVar(&deny, "deny-host", nil, "deny `PATTERN` (repeatable)")
	return c
}
