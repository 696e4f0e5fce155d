package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Bounds of what one server spends on the model's behalf. Every one is
// a fixed cap, not an option: a model cannot ask for more.
const (
	// MaxSandboxes is how many sandboxes one server keeps at once.
	MaxSandboxes = 8
	// MaxProcesses is how many background commands may run at once in
	// the server's sandboxes; maxProcessRecords bounds the per-command
	// records the server keeps (ended commands noted).
	MaxProcesses      = 16
	maxProcessRecords = 64
	// processBuffer is the most one process_read returns, and
	// maxInputPending a background command's input it has not read (the
	// sandbox's bound: process_write past it is refused).
	processBuffer   = 256 << 10
	maxInputPending = 1 << 20
	// defaultOutput and maxOutput bound what one exec returns of each
	// stream; defaultTimeout and maxTimeout its wall time.
	defaultOutput = 32 << 10
	maxOutput     = 1 << 20
	// maxDenials is how many refused destinations a sandbox's record
	// keeps.
	maxDenials = 64
)

// Options configure a [Server].
type Options struct {
	// Spec is what every sandbox the model creates is made from: the
	// operator's mounts, network policy, limits. The model never changes
	// it. Its Name and Labels are ignored.
	Spec sandbox.Spec
	// TemplatesDir, when not "", holds further specs the model may pick
	// by name (sandbox_create's template): tent policy files named
	// NAME.yaml, .yml or .json, as tent serve reads them. "default" is
	// Spec unless a file of that name replaces it.
	TemplatesDir string
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Version is reported to clients as the server's version.
	Version string
	// Keep leaves the sandboxes, and their background commands, running
	// when the server is closed (tent ls and tent ps show them); by
	// default Close terminates them.
	Keep bool
}

// Server is tent's MCP server: one set of sandboxes, created on a
// [sandbox.Backend] from the operator's specs, served to every session
// of its [sdk.Server] (stdio has one session; Streamable HTTP may have
// several, and they share the sandboxes). It is safe for concurrent use.
type Server struct {
	b    sandbox.Backend
	opts Options
	log  *slog.Logger
	srv  *sdk.Server

	mu        sync.Mutex
	boxes     []*box   // oldest first
	pending   []string // the names (or "") of sandboxes being made
	defaultID string
	snaps     map[string]string // snapshot id → the id of the sandbox it was taken of
	closed    bool
	// starting serialises process_start, which counts what runs.
	starting sync.Mutex
	// creating serialises the lazy creation of the default sandbox.
	creating sync.Mutex
}

// New returns a server over b. It checks that the operator's spec is
// valid for a sandbox (ErrInvalidSpec otherwise) without creating one.
func New(b sandbox.Backend, opts Options) (*Server, error) {
	if b == nil {
		return nil, fmt.Errorf("mcp: no backend: %w", sandbox.ErrInvalidOptions)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts.Spec.Name, opts.Spec.Labels = "", nil
	if err := checkSpec(b, opts.Spec); err != nil {
		return nil, err
	}
	s := &Server{b: b, opts: opts, log: log, snaps: map[string]string{}}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "tent", Title: "tent sandboxes", Version: version},
		&sdk.ServerOptions{Instructions: instructions, Logger: log})
	s.addTools()
	return s, nil
}

// checkSpec refuses at start what the first sandbox would be refused
// for, as far as that can be known without making one (fail closed
// before a model ever calls): host paths that do not exist, a network
// policy that does not parse, limits without a cgroup to enforce them.
func checkSpec(b sandbox.Backend, spec sandbox.Spec) error {
	for i, m := range spec.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("mcp: mount %d (%s): %w: %w", i+1, m.Target, sandbox.ErrInvalidSpec, err)
		}
	}
	if err := spec.Network.Validate(); err != nil {
		return fmt.Errorf("mcp: the network policy: %w: %w", sandbox.ErrInvalidSpec, err)
	}
	l := spec.Limits
	if (l.Memory > 0 || l.Pids > 0 || l.CPUs > 0) && b.Capabilities().CgroupVersion == "none" && !spec.BestEffort {
		return fmt.Errorf("mcp: --memory, --pids and --cpus need a cgroup, and the %s backend has none on this host (tent doctor says how to get one; --best-effort runs without): %w",
			b.Name(), sandbox.ErrUnsupported)
	}
	return nil
}

// instructions is what the server tells the model at initialisation.
const instructions = `tent runs your commands and file edits inside Linux sandboxes on this machine, never on the host itself.
The first tool call makes a default sandbox, so "sandbox" can be left out everywhere; sandbox_create makes more.
What a sandbox may be (its host mounts, network, limits) was fixed by the person who started this server: no tool widens it.
Paths are paths inside the sandbox; relative ones are taken from its working directory.
A command that fails to reach the network: network_status lists what the policy allows and what it refused.`

// MCPServer returns the SDK's server, to be run on any transport
// (this package's [StdioTransport], [Server.Handler], in-memory).
func (s *Server) MCPServer() *sdk.Server { return s.srv }

// Run serves one session on t until the client leaves or ctx ends.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	return s.srv.Run(ctx, t)
}

// Close, unless Options.Keep, terminates every sandbox the server made, and so
// their background commands (with Keep they run on: their sandbox owns
// them). Tool calls after Close fail.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	boxes := s.boxes
	if !s.opts.Keep {
		s.boxes = nil
	}
	s.mu.Unlock()
	var errs []error
	if !s.opts.Keep {
		for _, bx := range boxes {
			if err := handle.Open(ctx, s.b, bx.id).Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				errs = append(errs, fmt.Errorf("terminating sandbox %s: %w", bx.id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// errClosed is the tool error after Close.
var errClosed = errors.New("the tent MCP server is shutting down: no more tool calls")

// toolFunc is a typed tool handler.
type toolFunc[In, Out any] func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error)

// addTool registers a tool whose input schema is inferred from In, with
// one difference from the SDK's default: arguments the schema does not
// name are refused by the handler with a reason (a model asking for a
// host mount or a wider network learns why it cannot have one) rather
// than by the schema's validator.
func addTool[In, Out any](s *Server, t *sdk.Tool, h toolFunc[In, Out]) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: %v", t.Name, err)) // a programming error: the types are ours
	}
	schema.AdditionalProperties = nil
	t.InputSchema = schema
	known := schema.Properties
	sdk.AddTool(s.srv, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		var zero Out
		if err := checkArgs(req.Params.Arguments, known); err != nil {
			return nil, zero, err
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, zero, errClosed
		}
		res, out, err := h(ctx, req, in)
		if err != nil {
			s.log.Debug("mcp: tool call failed", "tool", t.Name, "err", err)
			return nil, zero, advise(err)
		}
		return res, out, nil
	})
}

// addTools registers every tool.
func (s *Server) addTools() {
	s.addSandboxTools()
	s.addExecTools()
	s.addProcessTools()
	s.addFileTools()
	s.addSnapshotTools()
	s.addNetworkTools()
}
