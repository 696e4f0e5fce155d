package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// statsInterval is how often tent stats samples (and the window of its
// CPU percentage).
const statsInterval = time.Second

// statsView is one sandbox's line of tent stats.
type statsView struct {
	ID string `json:"id"`
	sandbox.Usage
	Name string `json:"name,omitempty"`
	// CPUPercent is the CPU used over the last sampling interval, in
	// percent of one core (200 is two cores busy).
	CPUPercent float64 `json:"cpu_percent"`
	// Error says why the usage could not be read (no cgroup, stopped).
	Error string `json:"error,omitempty"`
}

func newStatsCmd(g *Globals) *cobra.Command {
	var out outputFlags
	var noStream bool
	c := &cobra.Command{
		Use:   "stats [--no-stream] [-o json] [--format TEMPLATE] [ID...]",
		Short: "Show the memory, CPU and processes of running sandboxes",
		Long: `Show what running sandboxes use, read from their cgroups (cgroup v2, or
the v1 hierarchies of a hybrid host): memory in use (without the page
cache that can be dropped) and its limit, CPU over the last second and
in total, and the number of tasks with their limit. Without ids, every
running or suspended sandbox. The table is redrawn every second until
Ctrl-C; --no-stream prints one sample (taken over one second) and exits,
as -o json and --format do.

A sandbox without a cgroup (an unprivileged caller whose systemd does
not delegate one) has no usage to show: its line says so.`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			recs, err := g.statsTargets(args)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			w := c.OutOrStdout()
			stream := !noStream && out.output == "" && out.format == ""
			tty := false
			if f, ok := w.(*os.File); ok {
				tty = term.IsTerminal(int(f.Fd()))
			}
			prev := sampleUsage(g.backend(), recs)
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(statsInterval):
				}
				cur := sampleUsage(g.backend(), recs)
				views := statsViews(recs, prev, cur)
				prev = cur
				if stream && tty {
					fmt.Fprint(w, "\033[2J\033[H") // redraw in place
				}
				if err := emit(&out, w, views, views, func() error { return writeStatsTable(w, views) }); err != nil {
					return err
				}
				if !stream {
					return nil
				}
			}
		},
	}
	out.register(c.Flags())
	c.Flags().BoolVar(&noStream, "no-stream", false, "print one sample and exit")
	return c
}

// statsTargets are the sandboxes named, or every running and suspended
// one.
func (g *Globals) statsTargets(refs []string) ([]*sandboxView, error) {
	var recs []*sandboxView
	for _, ref := range refs {
		rec, err := g.lookup(ref)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	if len(refs) > 0 {
		return recs, nil
	}
	all, err := g.list()
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: err.Error()}
	}
	for _, r := range all {
		if r.State == "running" || r.State == "suspended" {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// usageSample is the usage of each sandbox at one time.
type usageSample struct {
	at    time.Time
	usage []sandbox.Usage
	errs  []error
}

func sampleUsage(b sandbox.Backend, recs []*sandboxView) usageSample {
	s := usageSample{at: time.Now(), usage: make([]sandbox.Usage, len(recs)), errs: make([]error, len(recs))}
	for i, r := range recs {
		s.usage[i], s.errs[i] = handle.Open(context.Background(), b, r.ID).Usage(context.Background())
	}
	return s
}

func statsViews(recs []*sandboxView, prev, cur usageSample) []statsView {
	views := make([]statsView, len(recs))
	wall := cur.at.Sub(prev.at)
	for i, r := range recs {
		v := statsView{ID: r.ID, Usage: cur.usage[i], Name: r.Name}
		if err := cur.errs[i]; err != nil {
			v.Error = err.Error()
		} else if prev.errs[i] == nil && wall > 0 {
			v.CPUPercent = float64(cur.usage[i].CPUNanos-prev.usage[i].CPUNanos) / float64(wall.Nanoseconds()) * 100
			v.CPUPercent = max(0, float64(int64(v.CPUPercent*100))/100)
		}
		views[i] = v
	}
	return views
}

func writeStatsTable(w io.Writer, views []statsView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCPU %\tCPU TIME\tMEM USAGE / LIMIT\tMEM %\tPIDS")
	for _, v := range views {
		if v.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t(%s)\n", v.ID, v.Name, v.Error)
			continue
		}
		limit, pct := "-", "-"
		if v.MemoryLimit > 0 {
			limit = humanSize(v.MemoryLimit)
			pct = fmt.Sprintf("%.2f%%", float64(v.MemoryBytes)/float64(v.MemoryLimit)*100)
		}
		pids := fmt.Sprint(v.Pids)
		if v.PidsLimit > 0 {
			pids += fmt.Sprintf(" / %d", v.PidsLimit)
		}
		cpu := time.Duration(v.CPUNanos).Round(10 * time.Millisecond)
		fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%s\t%s / %s\t%s\t%s\n", v.ID, v.Name, v.CPUPercent, cpu, humanSize(v.MemoryBytes), limit, pct, pids)
	}
	return tw.Flush()
}
