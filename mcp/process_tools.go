package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tent-sandbox/tent/sandbox"
)

// processView is a background command's state.
type processView struct {
	ID       string `json:"id" jsonschema:"the id process_read, process_write and process_kill take: SANDBOX:PID"`
	Pid      int    `json:"pid" jsonschema:"its pid inside the sandbox (process_read and the others take it too, with sandbox)"`
	Sandbox  string `json:"sandbox"`
	Command  string `json:"command"`
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"set once it ended: 128+N for signal N"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty" jsonschema:"why it has no exit status, when it has none"`
	// OutputBytes is every byte written so far.
	OutputBytes int64 `json:"output_bytes" jsonschema:"how many bytes of output it wrote in all (less what tent attach took)"`
}

// viewOf describes a command of bx.
func viewOf(bx *box, pi sandbox.ProcessInfo) processView {
	v := processView{ID: procID(bx, pi.Pid), Pid: pi.Pid, Sandbox: bx.id, Command: commandOf(pi.Args), Running: pi.Running,
		OutputBytes: pi.Unread + pi.Dropped}
	if !pi.Running {
		v.ExitCode, v.Signal = ptr(pi.Exit), pi.Signal
	}
	return v
}

// procView describes p now; an ended command's network denials are noted.
func (s *Server) procView(ctx context.Context, p *proc) (processView, error) {
	pi, err := p.info(ctx)
	if err != nil {
		return processView{}, err
	}
	v := viewOf(p.bx, pi)
	if !pi.Running {
		switch res, err := p.p.Wait(ctx); {
		case err == nil:
			s.noteDenialsOnce(p, res)
		case errors.Is(err, sandbox.ErrTerminated):
			v.Error = advise(err).Error()
		}
	}
	return v, nil
}

type processStartIn struct {
	Command        string            `json:"command" jsonschema:"a shell command line (sh -c) to start in the background, e.g. a server or a long build"`
	Sandbox        string            `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox (default: the sandbox's)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to set for this command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text to give it on its standard input at once (process_write sends more)"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill it after this many seconds (default: no timeout but the sandbox's own; at most 1800)"`
}

type processIDIn struct {
	ID      string `json:"id" jsonschema:"the background command's id (from process_start or process_list), or its pid"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox of a pid given as id; leave out for the default sandbox"`
}

type processReadIn struct {
	processIDIn
	Offset      int64   `json:"offset,omitempty" jsonschema:"read output from this byte on: the next_offset of the previous read (default 0, the start)"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 30) for new output or the end, when there is none yet (default 0: no wait, what is there now)"`
	MaxBytes    int     `json:"max_bytes,omitempty" jsonschema:"at most this many bytes (default 32768, at most 262144)"`
	Stream      string  `json:"stream,omitempty" jsonschema:"stdout (the default: a process_start command's stdout and stderr together) or stderr (of a command started otherwise, e.g. tent exec -d)"`
}

type processReadOut struct {
	processView
	Output     string `json:"output" jsonschema:"stdout and stderr, interleaved as written"`
	NextOffset int64  `json:"next_offset" jsonschema:"pass it as offset to read what follows"`
	Dropped    int64  `json:"dropped" jsonschema:"bytes after offset that were no longer kept (only the last MiB is)"`
}

type processWriteIn struct {
	processIDIn
	Input      string `json:"input" jsonschema:"text to send to its standard input (include the newline)"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close its standard input after this text (end of file)"`
}

type processListOut struct {
	Processes []processView `json:"processes"`
}

func (s *Server) addProcessTools() {
	addTool(s, &sdk.Tool{Name: "process_start", Title: "Start a background command",
		Description: "Start a shell command line (sh -c) in the background inside a sandbox and return its id (SANDBOX:PID, its pid inside) at once: for servers, watchers and long builds. " +
			"Read its output with process_read, send it input with process_write, stop it with process_kill. " +
			fmt.Sprintf("At most %d run at once; the last MiB of each one's output is kept. No timeout unless timeout_seconds is given. ", MaxProcesses) +
			"The sandbox owns it, not this session: it runs on when the client disconnects, and any session finds it (process_list); it ends when killed or with its sandbox."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processStartIn) (*sdk.CallToolResult, processView, error) {
			if strings.TrimSpace(in.Command) == "" {
				return nil, processView{}, fmt.Errorf("command is empty: give a shell command line")
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, processView{}, err
			}
			o := runOpts{Sandbox: in.Sandbox, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, TimeoutSeconds: in.TimeoutSeconds}
			p, info, err := s.startProcess(ctx, bx, o, in.Command)
			if err != nil {
				return nil, processView{}, err
			}
			return nil, viewOf(p.bx, info), nil
		})
	addTool(s, &sdk.Tool{Name: "process_read", Title: "Read a background command's output",
		Description: "Return a background command's output from an offset on (stdout and stderr interleaved), whether it still runs, and its exit status once it ended. Pass the returned next_offset to read what follows; wait_seconds waits for new output.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processReadIn) (*sdk.CallToolResult, processReadOut, error) {
			return s.processRead(ctx, in)
		})
	addTool(s, &sdk.Tool{Name: "process_write", Title: "Send input to a background command",
		Description: "Send text to a background command's standard input (include the newline); close_stdin ends its input. At most 1 MiB may wait unread."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processWriteIn) (*sdk.CallToolResult, processView, error) {
			p, err := s.lookupProcess(ctx, in.ID, in.Sandbox)
			if err != nil {
				return nil, processView{}, err
			}
			v, err := s.procView(ctx, p)
			if err != nil {
				return nil, processView{}, err
			}
			if !v.Running {
				return nil, processView{}, fmt.Errorf("background command %s has ended: process_read shows how", v.ID)
			}
			if pi, err := p.info(ctx); err == nil && !pi.Stdin {
				return nil, processView{}, fmt.Errorf("the command's input is already closed")
			}
			// The sandbox queues the input (at most
			// 1 MiB unread) and never waits for the
			// command: a write past that is refused, not buffered here.
			if in.Input != "" {
				if err := p.p.WriteStdin(ctx, []byte(in.Input)); err != nil {
					return nil, processView{}, err
				}
			}
			if in.CloseStdin {
				if err := p.p.CloseStdin(ctx); err != nil {
					return nil, processView{}, err
				}
			}
			return nil, v, nil
		})
	addTool(s, &sdk.Tool{Name: "process_kill", Title: "Kill a background command",
		Description: "Kill a background command and its children, and return how it ended.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processIDIn) (*sdk.CallToolResult, processView, error) {
			p, err := s.lookupProcess(ctx, in.ID, in.Sandbox)
			if err != nil {
				return nil, processView{}, err
			}
			if err := p.kill(ctx); err != nil {
				return nil, processView{}, err
			}
			v, err := s.procView(ctx, p)
			return nil, v, err
		})
	addTool(s, &sdk.Tool{Name: "process_list", Title: "List background commands",
		Description: "List the background commands of this server's sandboxes, whoever started them: running ones and recently ended ones.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, processListOut, error) {
			out := processListOut{Processes: []processView{}}
			s.eachProcess(ctx, func(bx *box, pi sandbox.ProcessInfo) { out.Processes = append(out.Processes, viewOf(bx, pi)) })
			return nil, out, nil
		})
}

// processRead is process_read.
func (s *Server) processRead(ctx context.Context, in processReadIn) (*sdk.CallToolResult, processReadOut, error) {
	limit := defaultOutput
	switch {
	case in.MaxBytes < 0 || in.MaxBytes > processBuffer:
		return nil, processReadOut{}, fmt.Errorf("max_bytes %d: want 1 to %d", in.MaxBytes, processBuffer)
	case in.MaxBytes > 0:
		limit = in.MaxBytes
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > 30 {
		return nil, processReadOut{}, fmt.Errorf("wait_seconds %v: want 0 to 30", in.WaitSeconds)
	}
	if in.Offset < 0 {
		return nil, processReadOut{}, fmt.Errorf("offset %d: want 0 or a next_offset", in.Offset)
	}
	fd := 1
	switch in.Stream {
	case "", "stdout":
	case "stderr":
		fd = 2
	default:
		return nil, processReadOut{}, fmt.Errorf("stream %q: want stdout or stderr", in.Stream)
	}
	p, err := s.lookupProcess(ctx, in.ID, in.Sandbox)
	if err != nil {
		return nil, processReadOut{}, err
	}
	// Without wait_seconds the read's ctx has ended before it starts,
	// which asks for what is there now (see sandbox.Process.ReadOutput).
	rctx, cancel := context.WithTimeout(ctx, time.Duration(in.WaitSeconds*float64(time.Second)))
	out, err := readOutput(rctx, p.p, fd, in.Offset, limit)
	waited := rctx.Err()
	cancel()
	if err != nil && (ctx.Err() != nil || waited == nil || !errors.Is(err, waited)) {
		return nil, processReadOut{}, err
	}
	v, err := s.procView(ctx, p)
	if err != nil {
		return nil, processReadOut{}, err
	}
	if !v.Running && !out.End && len(out.Data) < limit {
		// It ended after the read: what it wrote last is all there now.
		if out, err = readOutput(ctx, p.p, fd, in.Offset, limit); err != nil {
			return nil, processReadOut{}, err
		}
	}
	return nil, processReadOut{processView: v, Output: strings.ToValidUTF8(string(out.Data), "\uFFFD"),
		NextOffset: out.Offset + int64(len(out.Data)), Dropped: out.Dropped}, nil
}
