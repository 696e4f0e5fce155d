package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// outputFlags are the read verbs' output flags, as docker has them:
// -o/--output table|json and --format TEMPLATE (a Go text/template
// applied to each item; {{json .}} prints an item as JSON).
type outputFlags struct {
	output string
	format string
}

func (o *outputFlags) register(f *pflag.FlagSet) {
	f.StringVarP(&o.output, "output", "o", "", "output format: `table` (default) or json")
	f.StringVar(&o.format, "format", "", "print each item through the Go `TEMPLATE` (such as '{{.ID}} {{.State}}'; {{json .}} for JSON)")
}

// check refuses an unknown -o and a template that does not parse, before
// anything is done.
func (o *outputFlags) check() error {
	switch o.output {
	case "", "table", "json":
	default:
		return &exitError{code: exitRefused, msg: fmt.Sprintf("-o %q: want table or json", o.output)}
	}
	if o.format != "" && o.output != "" {
		return &exitError{code: exitRefused, msg: "give -o or --format, not both"}
	}
	if o.format != "" {
		if _, err := o.template(); err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
	}
	return nil
}

func (o *outputFlags) template() (*template.Template, error) {
	t, err := template.New("format").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"join": strings.Join,
	}).Parse(o.format)
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	return t, nil
}

// emit prints items: as one indented JSON document (all, a list or an
// object) with -o json, through the template once per item with
// --format, else with table.
func emit[T any](o *outputFlags, w io.Writer, all any, items []T, table func() error) error {
	switch {
	case o.output == "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	case o.format != "":
		t, err := o.template()
		if err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		for _, it := range items {
			if err := t.Execute(w, it); err != nil {
				return &exitError{code: exitRefused, msg: "--format: " + err.Error()}
			}
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		return nil
	}
	return table()
}

// humanSize is n bytes for a table: 512B, 1.5K, 381.5M, 2.0G (powers of
// 1024, as tent's size flags).
func humanSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"K", "M", "G", "T", "P"} {
		f /= 1024
		if f < 1024 || u == "P" {
			return fmt.Sprintf("%.1f%s", f, u)
		}
	}
	return ""
}

// humanAge is how long ago t was, for a table: "5 seconds ago", "3
// minutes ago", "2 hours ago", "4 days ago".
func humanAge(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	n, unit := int64(d/time.Second), "second"
	switch {
	case d >= 48*time.Hour:
		n, unit = int64(d/(24*time.Hour)), "day"
	case d >= 2*time.Hour:
		n, unit = int64(d/time.Hour), "hour"
	case d >= 2*time.Minute:
		n, unit = int64(d/time.Minute), "minute"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s ago", n, unit)
}

// progress shows, on stderr when it is a terminal, "tent: WHAT... Ns" once
// an operation has taken a second, updated every second, and erases it
// when the returned stop is called. Elsewhere (a pipe, a file, CI logs)
// it prints nothing.
func progress(what string) (stop func()) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return func() {}
	}
	t := time.NewTicker(time.Second)
	return showProgress(os.Stderr, what, t.C, t.Stop)
}

// showProgress is progress with its output and ticks given: a line at
// each tick, rewritten in place (\r), erased by stop if one was shown.
func showProgress(w io.Writer, what string, ticks <-chan time.Time, stopTicks func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		shown := false
		for n := 1; ; n++ {
			select {
			case <-done:
				if shown {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-ticks:
				fmt.Fprintf(w, "\rtent: %s... %ds", what, n)
				shown = true
			}
		}
	}()
	return func() {
		stopTicks()
		close(done)
		<-finished
	}
}
