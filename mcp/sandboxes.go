package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// box is a sandbox this server made: the model sees only these.
type box struct {
	id       string
	name     string
	template string
	created  time.Time
	// denials are the destinations the network policy refused during the
	// commands this server ran in the sandbox, oldest first, at most
	// maxDenials (guarded by Server.mu).
	denials []policy.Denial
	// ended are the pids of background commands whose end (and denials)
	// was noted, the last maxProcessRecords (guarded by Server.mu).
	ended []int
}

// labelTemplate is the label naming a sandbox's template, as tent serve
// sets it; labelOwner marks the sandboxes tent mcp made.
const (
	labelTemplate = "tent.template"
	labelOwner    = "tent.owner"
)

// defaultTemplate names Options.Spec.
const defaultTemplate = "default"

// errNoSandbox is a reference to a sandbox this server does not have.
var errNoSandbox = errors.New("no such sandbox")

// templateSpec returns the spec of the named template: "" or "default"
// is Options.Spec unless the templates directory has a default file;
// others are read from the templates directory now, so that an edit
// applies to the next sandbox.
func (s *Server) templateSpec(name string) (sandbox.Spec, string, error) {
	if name == "" {
		name = defaultTemplate
	}
	spec, found, err := policy.LoadTemplate(s.opts.TemplatesDir, "template", name)
	switch {
	case errors.Is(err, policy.ErrTemplateName):
		return sandbox.Spec{}, "", err
	case err != nil:
		return sandbox.Spec{}, "", fmt.Errorf("template %s is broken (tell the operator): %w", name, err)
	case found:
		return spec, name, nil
	}
	if name == defaultTemplate {
		return s.opts.Spec, name, nil
	}
	return sandbox.Spec{}, "", fmt.Errorf("no template %q: sandbox_create's description lists the templates", name)
}

// templates lists the template names the model may pick.
func (s *Server) templates() []string {
	names := []string{defaultTemplate}
	if s.opts.TemplatesDir == "" {
		return names
	}
	found, err := policy.TemplateNames(s.opts.TemplatesDir)
	if err != nil {
		return names
	}
	for _, n := range found {
		if n != defaultTemplate {
			names = append(names, n)
		}
	}
	return names
}

// create provisions a sandbox from a template and records it.
func (s *Server) create(ctx context.Context, template, name string) (*box, error) {
	if name != "" && !policy.ValidName(name) {
		return nil, fmt.Errorf("name %q: a name is 1 to 128 letters, digits, '.', '_' or '-'", name)
	}
	spec, template, err := s.templateSpec(template)
	if err != nil {
		return nil, err
	}
	if err := s.reserve(name); err != nil {
		return nil, err
	}
	spec.Name = ""
	spec.Labels = map[string]string{labelTemplate: template, labelOwner: "tent-mcp"}
	info, err := s.b.Provision(ctx, spec)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(name)
	if err != nil {
		return nil, fmt.Errorf("creating a sandbox: %w", err)
	}
	bx := &box{id: info.ID, name: name, template: template, created: info.Created}
	if s.closed {
		_ = handle.Open(context.WithoutCancel(ctx), s.b, info.ID).Terminate(context.WithoutCancel(ctx))
		return nil, errClosed
	}
	s.boxes = append(s.boxes, bx)
	s.log.Info("mcp: sandbox created", "id", info.ID, "template", template)
	return bx, nil
}

// reserve takes one of the MaxSandboxes slots, and name, for a sandbox
// about to be made; release (with s.mu held) gives them back once it is
// made or failed.
func (s *Server) reserve(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.boxes) + len(s.pending); n >= MaxSandboxes {
		return fmt.Errorf("this server already has %d sandboxes, its maximum: sandbox_kill one first", n)
	}
	if name != "" {
		for _, b := range s.boxes {
			if b.name == name {
				return fmt.Errorf("a sandbox is already named %q: pick another name", name)
			}
		}
		if slices.Contains(s.pending, name) {
			return fmt.Errorf("a sandbox named %q is being made: pick another name", name)
		}
	}
	s.pending = append(s.pending, name)
	return nil
}

func (s *Server) release(name string) {
	if i := slices.Index(s.pending, name); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}

// resolve finds the sandbox ref names among this server's (an id, a
// unique id prefix or a name); "" is the default sandbox, created on
// first use.
func (s *Server) resolve(ctx context.Context, ref string) (*box, error) {
	if ref == "" {
		return s.defaultBox(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *box
	for _, b := range s.boxes {
		switch {
		case b.id == ref || (b.name != "" && b.name == ref):
			return b, nil
		case strings.HasPrefix(b.id, ref):
			if found != nil {
				return nil, fmt.Errorf("sandbox %q: %w", ref, sandbox.ErrAmbiguous)
			}
			found = b
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w %q: sandbox_list shows this server's sandboxes; leave sandbox out to use the default one", errNoSandbox, ref)
	}
	return found, nil
}

// defaultBox returns the default sandbox, creating it the first time
// (and again after it was killed).
func (s *Server) defaultBox(ctx context.Context) (*box, error) {
	s.creating.Lock()
	defer s.creating.Unlock()
	s.mu.Lock()
	for _, b := range s.boxes {
		if b.id == s.defaultID {
			s.mu.Unlock()
			return b, nil
		}
	}
	s.mu.Unlock()
	bx, err := s.create(ctx, "", "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.defaultID = bx.id
	s.mu.Unlock()
	return bx, nil
}

// forget drops a sandbox from the server's records.
func (s *Server) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.boxes {
		if b.id == id {
			s.boxes = append(s.boxes[:i], s.boxes[i+1:]...)
			break
		}
	}
	if s.defaultID == id {
		s.defaultID = ""
	}
}

// noteDenials adds a command's refused destinations to its sandbox's
// record, keeping the most recent maxDenials.
func (s *Server) noteDenials(bx *box, ds []policy.Denial) {
	if len(ds) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	bx.denials = append(bx.denials, ds...)
	if over := len(bx.denials) - maxDenials; over > 0 {
		bx.denials = append([]policy.Denial(nil), bx.denials[over:]...)
	}
}

// sandboxView is a sandbox as the tools describe it.
type sandboxView struct {
	ID       string    `json:"id" jsonschema:"the sandbox's id"`
	Name     string    `json:"name,omitempty" jsonschema:"the name given at creation"`
	Template string    `json:"template" jsonschema:"the template it was made from"`
	Default  bool      `json:"default" jsonschema:"whether tools use it when sandbox is left out"`
	State    string    `json:"state" jsonschema:"running, suspended or stopped"`
	Created  time.Time `json:"created"`
	Workdir  string    `json:"workdir" jsonschema:"the working directory relative paths are taken from"`
	Network  string    `json:"network" jsonschema:"none, limited or host"`
	Mounts   []string  `json:"mounts" jsonschema:"the host directories it sees, as TARGET (ro|rw|cow)"`
	Limits   limitView `json:"limits"`
}

// limitView is a sandbox's limits (0: none).
type limitView struct {
	MemoryBytes    int64   `json:"memory_bytes"`
	Pids           int64   `json:"pids"`
	CPUs           float64 `json:"cpus"`
	TimeoutSeconds float64 `json:"timeout_seconds" jsonschema:"the sandbox's whole life; 0 means none"`
}

func (s *Server) view(bx *box, info sandbox.Info) sandboxView {
	v := sandboxView{ID: bx.id, Name: bx.name, Template: bx.template, State: string(info.State), Created: info.Created,
		Workdir: info.Spec.Workdir, Network: string(info.Spec.Network.Mode), Mounts: []string{},
		Limits: limitView{MemoryBytes: info.Spec.Limits.Memory, Pids: info.Spec.Limits.Pids, CPUs: info.Spec.Limits.CPUs,
			TimeoutSeconds: info.Spec.Limits.Timeout.Seconds()}}
	s.mu.Lock()
	v.Default = bx.id == s.defaultID
	s.mu.Unlock()
	if v.Workdir == "" {
		v.Workdir = "/"
	}
	if v.Network == "" {
		v.Network = "none"
	}
	for _, m := range info.Spec.Mounts {
		access := m.Access
		if access == "" {
			access = sandbox.ReadOnly
		}
		v.Mounts = append(v.Mounts, fmt.Sprintf("%s (%s)", m.Target, access))
	}
	return v
}

type createIn struct {
	Template string `json:"template,omitempty" jsonschema:"the operator's template to make it from (default: \"default\")"`
	Name     string `json:"name,omitempty" jsonschema:"a name to refer to it by (letters, digits, '.', '_', '-')"`
}

type sandboxRef struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
}

type listOut struct {
	Sandboxes []sandboxView `json:"sandboxes"`
	Templates []string      `json:"templates" jsonschema:"the templates sandbox_create accepts"`
}

type killOut struct {
	Killed string `json:"killed" jsonschema:"the id of the sandbox killed"`
}

func (s *Server) addSandboxTools() {
	addTool(s, &sdk.Tool{Name: "sandbox_create", Title: "Create a sandbox",
		Description: "Create a new, empty Linux sandbox and return its id. Only needed for a second sandbox: every tool uses a default sandbox, made on first use, when its sandbox argument is left out. " +
			"Its host mounts, network and limits come from the template the operator set up; they cannot be changed or widened by any tool. " +
			fmt.Sprintf("At most %d sandboxes at once.", MaxSandboxes)},
		func(ctx context.Context, _ *sdk.CallToolRequest, in createIn) (*sdk.CallToolResult, sandboxView, error) {
			bx, err := s.create(ctx, in.Template, in.Name)
			if err != nil {
				return nil, sandboxView{}, err
			}
			info, err := handle.Open(ctx, s.b, bx.id).Info(ctx)
			if err != nil {
				return nil, sandboxView{}, err
			}
			return nil, s.view(bx, info), nil
		})
	addTool(s, &sdk.Tool{Name: "sandbox_list", Title: "List sandboxes",
		Description: "List the sandboxes of this server (id, name, state, working directory, network, mounts, limits) and the templates sandbox_create accepts.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, listOut, error) {
			s.mu.Lock()
			boxes := append([]*box(nil), s.boxes...)
			s.mu.Unlock()
			out := listOut{Sandboxes: []sandboxView{}, Templates: s.templates()}
			for _, bx := range boxes {
				info, err := handle.Open(ctx, s.b, bx.id).Info(ctx)
				if err != nil {
					continue // killed meanwhile
				}
				out.Sandboxes = append(out.Sandboxes, s.view(bx, info))
			}
			return nil, out, nil
		})
	addTool(s, &sdk.Tool{Name: "sandbox_inspect", Title: "Inspect a sandbox",
		Description: "Describe one sandbox: state, working directory, network mode, host mounts (read-only, read-write or copy-on-write) and limits.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxRef) (*sdk.CallToolResult, sandboxView, error) {
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, sandboxView{}, err
			}
			info, err := handle.Open(ctx, s.b, bx.id).Info(ctx)
			if err != nil {
				return nil, sandboxView{}, err
			}
			return nil, s.view(bx, info), nil
		})
	addTool(s, &sdk.Tool{Name: "sandbox_kill", Title: "Kill a sandbox",
		Description: "Kill a sandbox: every process in it ends and its files are gone (snapshots stay). Killing the default sandbox makes the next tool call create a fresh one.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxRef) (*sdk.CallToolResult, killOut, error) {
			if in.Sandbox == "" {
				s.mu.Lock()
				in.Sandbox = s.defaultID
				s.mu.Unlock()
				if in.Sandbox == "" {
					return nil, killOut{}, fmt.Errorf("%w: there is no default sandbox yet", errNoSandbox)
				}
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, killOut{}, err
			}
			if err := handle.Open(ctx, s.b, bx.id).Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				return nil, killOut{}, err
			}
			s.forget(bx.id)
			return nil, killOut{Killed: bx.id}, nil
		})
}

func ptr[T any](v T) *T { return &v }
