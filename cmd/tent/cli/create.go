package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// createOptions are tent create's flags: run's, plus a name and labels.
type createOptions struct {
	RunOptions
	name   string
	labels []string
	// idleAfter is --idle-after: "" (the default), "never" or a duration.
	idleAfter string
	publish   []string
}

func (o *createOptions) register(f *pflag.FlagSet) {
	o.RunOptions.register(f)
	f.StringVar(&o.name, "name", "", "a `NAME` to refer to the sandbox by")
	f.StringArrayVarP(&o.publish, "publish", "p", nil, "publish TCP port `[HOSTIP:]HOSTPORT:PORT` of the sandbox on the host (repeatable; HOSTIP defaults to 127.0.0.1; see tent port)")
	f.StringArrayVar(&o.labels, "label", nil, "attach a `K=V` label (repeatable)")
	f.StringVar(&o.idleAfter, "idle-after", "", "after `D` with no request, replace the idle sandbox's init and supervisor by small idle holders (default 10s; \"never\" keeps them)")
}

// parseIdleAfter reads --idle-after as sandbox.ProvisionOptions.IdleAfter:
// "" is the default (0), "never" is negative, anything else a positive
// duration.
func parseIdleAfter(v string) (time.Duration, error) {
	switch v {
	case "":
		return 0, nil
	case "never":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--idle-after %q: want a positive duration (such as 30s) or never", v)
	}
	return d, nil
}

func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want K=V", kv)
		}
		m[k] = v
	}
	return m, nil
}

func newCreateCmd(g *Globals) *cobra.Command {
	o := &createOptions{}
	c := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a long-lived sandbox and print its id",
		Long: `Create a sandbox that keeps running (owned by a small supervisor process)
until tent rm, and print its id as the last line of stdout. It takes the
same flags as tent run; --timeout bounds the sandbox's whole life.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("report") {
				// The report of tent run describes one command; a
				// long-lived sandbox's is tent inspect (and its exec
				// results come back from each tent exec).
				return &exitError{code: exitRefused, msg: "--report is tent run's (one command's report); for a sandbox made by tent create, see tent inspect ID -o json"}
			}
			cwd, _ := os.Getwd()
			spec, err := BuildSpec(c.Flags(), &o.RunOptions, os.LookupEnv, cwd, g.logger())
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			if spec.Labels, err = parseLabels(o.labels); err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			for _, p := range o.publish {
				m, err := parsePublish(p)
				if err != nil {
					return &exitError{code: exitRefused, msg: err.Error()}
				}
				spec.Ports = append(spec.Ports, m)
			}
			spec.Name = o.name
			if c.Flags().Changed("name") && o.name == "" {
				return &exitError{code: exitRefused, msg: "--name \"\": want a name"}
			}
			idleAfter, err := parseIdleAfter(o.idleAfter)
			if err != nil {
				return &exitError{code: exitRefused, msg: err.Error()}
			}
			netLog := o.netLog
			if netLog != "" {
				if netLog, err = filepath.Abs(netLog); err != nil {
					return &exitError{code: exitRefused, msg: "--net-log: " + err.Error()}
				}
			}
			b := g.BackendWith(supervised.Options{IdleAfter: idleAfter, NetLog: netLog})
			info, err := b.Provision(c.Context(), spec)
			if err != nil {
				return refused(err)
			}
			fmt.Fprintln(c.OutOrStdout(), info.ID)
			return nil
		},
	}
	o.register(c.Flags())
	_ = c.Flags().MarkHidden("report")
	return c
}
