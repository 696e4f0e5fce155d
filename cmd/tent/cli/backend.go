package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// The verbs of long-lived sandboxes (create, exec, ls, rm, ...) work over
// the supervised backend of the state directory: each sandbox has a
// supervisor process of its own, which outlives tent's invocations.

// BackendWith returns the supervised backend of the state directory
// (made absolute by the root command); the supervisors it starts get
// opts (idle hand-off, network log).
func (g *Globals) BackendWith(opts supervised.Options) *supervised.Backend {
	if opts.Logger == nil {
		opts.Logger = g.logger()
	}
	b, err := supervised.Open(g.stateDir, opts)
	if err != nil { // an absolute directory always opens
		panic(fmt.Sprintf("opening the state directory %q: %v", g.stateDir, err))
	}
	return b
}

func (g *Globals) backend() *supervised.Backend { return g.BackendWith(supervised.Options{}) }

// sandboxView is a sandbox as tent ls -o json, inspect and --format show
// it (the Go names are the template's: {{.Name}}, {{.State}}...). A
// sandbox whose record cannot be read (supervised.RecordError) is listed
// with its id (from the file's name), State "broken", the record's file
// and the error, and nothing else.
type sandboxView struct {
	ID          string               `json:"id"`
	Name        string               `json:"name,omitempty"`
	Labels      map[string]string    `json:"labels,omitempty"`
	Created     time.Time            `json:"created,omitzero"`
	State       sandbox.State        `json:"state"`
	Record      string               `json:"record,omitempty"` // a broken record's file
	Error       string               `json:"error,omitempty"`  // what is wrong with it
	Spec        sandbox.Spec         `json:"spec,omitzero"`
	Protections []sandbox.Protection `json:"protections,omitempty"`
	Layers      []sandbox.CowLayer   `json:"layers,omitempty"`
	Cgroups     []string             `json:"cgroups,omitempty"`
	Supervisor  int                  `json:"supervisor_pid,omitempty"`
	Ended       *time.Time           `json:"ended,omitempty"`
	Reason      string               `json:"reason,omitempty"`

	sb *supervised.Sandbox // set by lookup (not by list): the handle its verbs act on
}

// stateBroken is the State of a sandbox whose record cannot be read.
const stateBroken sandbox.State = "broken"

// brokenView describes a sandbox whose record cannot be read.
func brokenView(e *supervised.RecordError) *sandboxView {
	return &sandboxView{ID: e.ID, State: stateBroken, Record: e.Path, Error: e.Err.Error()}
}

func viewOf(i sandbox.Info) *sandboxView {
	spec := i.Spec
	spec.Name, spec.Labels = "", nil // shown once, above
	return &sandboxView{ID: i.ID, Name: i.Spec.Name, Labels: i.Spec.Labels, Created: i.Created, State: i.State, Spec: spec,
		Protections: i.Protections, Layers: i.Layers, Cgroups: i.CgroupPaths, Supervisor: i.SupervisorPID, Ended: i.Ended, Reason: i.Reason}
}

// lookup opens a sandbox (its view carries the handle its verbs act
// on), as tent's exit-125 refusal when missing.
func (g *Globals) lookup(ref string) (*sandboxView, error) {
	ctx := context.Background()
	sb, i, err := g.backend().Lookup(ctx, ref)
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: err.Error(), err: err}
	}
	v := viewOf(i)
	v.sb = sb
	return v, nil
}

// handle opens a sandbox for a verb that only reaches its supervisor
// (tent exec): lookup without the sandbox's Info, so without decoding
// its record's Spec (see supervised.Backend.Sandbox).
func (g *Globals) handle(ref string) (*supervised.Sandbox, error) {
	sb, err := g.backend().Sandbox(context.Background(), ref)
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: err.Error()}
	}
	return sb, nil
}

// list returns every sandbox of the state directory, oldest first, then
// those whose record is broken, by id.
func (g *Globals) list() ([]*sandboxView, error) {
	all, broken, err := g.backend().ListAll(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]*sandboxView, 0, len(all)+len(broken))
	for _, info := range all {
		out = append(out, viewOf(info))
	}
	for _, b := range broken {
		out = append(out, brokenView(b))
	}
	return out, nil
}

// refused turns a backend's error into tent's exit code for it.
func refused(err error) error {
	return &exitError{code: sandbox.ExitCode(err), msg: err.Error()}
}
