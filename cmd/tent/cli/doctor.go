package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox/doctor"
)

// exitMissing is tent doctor's status when a protection is missing.
const exitMissing = 1

func newDoctorCmd() *cobra.Command {
	var asJSON, apparmor bool
	var output string
	c := &cobra.Command{
		Use:   "doctor [-o json | --apparmor-profile]",
		Short: "Check which protections this host can enforce",
		Long: `Check this host for every protection tent uses (user namespaces,
Landlock, seccomp, cgroups, overlayfs in a user namespace, idmapped
mounts, the kernel) and print, for each, available, degraded or missing
with the reason and the fix. Where user namespaces are unavailable, tent
run falls back to its reduced tier (see tent run --tier).

--apparmor-profile prints an AppArmor profile that lets this tent binary
create user namespaces on hosts with
kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10 and later),
with a comment saying where to install it and how to load it.

Exit status: 0 when nothing is missing, 1 when something is, 125 when
the check itself failed.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch output {
			case "", "table":
			case "json":
				asJSON = true
			default:
				return &exitError{code: exitRefused, msg: fmt.Sprintf("-o %q: want table or json", output)}
			}
			if apparmor {
				exe, err := os.Executable()
				if err != nil {
					return &exitError{code: exitRefused, msg: "finding the tent binary: " + err.Error()}
				}
				_, err = io.WriteString(c.OutOrStdout(), doctor.AppArmorProfile(exe))
				if err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				return nil
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep := doctor.Run(ctx)
			var err error
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.WriteText(c.OutOrStdout())
			}
			if err != nil {
				return &exitError{code: exitRefused, msg: "writing the report: " + err.Error()}
			}
			for _, check := range rep.Checks {
				if check.Status == "missing" {
					return &exitError{code: exitMissing}
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON (the same as -o json)")
	c.Flags().StringVarP(&output, "output", "o", "", "output format: `table` (default) or json")
	c.Flags().BoolVar(&apparmor, "apparmor-profile", false, "print an AppArmor profile that allows this tent binary to create user namespaces, and exit")
	return c
}
