package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// Bounds of one exec's wall time.
const (
	defaultTimeout = 2 * time.Minute
	maxTimeout     = 30 * time.Minute
	// progressEvery is how often a command that runs sends progress
	// notifications, when the client asked for them.
	progressEvery = time.Second
	// maxStdin bounds an exec's stdin argument, and maxArgBytes its argv
	// or script.
	maxStdin    = 1 << 20
	maxArgBytes = 256 << 10
)

// runOpts are the options exec and shell share.
type runOpts struct {
	Sandbox        string            `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox (default: the sandbox's)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to set for this command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input (at most 1 MiB; default: none)"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default 120, at most 1800); the result then says timed_out"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"how much of each of stdout and stderr to return (default 32768, at most 1048576); past it the middle is cut and the result says so"`
}

type execIn struct {
	Argv []string `json:"argv" jsonschema:"the command and its arguments, run without a shell; argv[0] is looked up in PATH inside the sandbox"`
	runOpts
}

type shellIn struct {
	Command string `json:"command" jsonschema:"a shell script, run with sh -c inside the sandbox (pipes, redirections, &&, cd all work)"`
	runOpts
}

// execOut is how a command ended.
type execOut struct {
	Sandbox         string       `json:"sandbox" jsonschema:"the id of the sandbox it ran in"`
	ExitCode        int          `json:"exit_code" jsonschema:"the exit status; 128+N when killed by signal N; 124 on timeout"`
	Signal          string       `json:"signal,omitempty" jsonschema:"the signal that killed it"`
	TimedOut        bool         `json:"timed_out"`
	OOMKilled       bool         `json:"oom_killed,omitempty" jsonschema:"the sandbox's memory limit killed a process"`
	DurationSeconds float64      `json:"duration_seconds"`
	Stdout          string       `json:"stdout"`
	Stderr          string       `json:"stderr"`
	StdoutBytes     int64        `json:"stdout_bytes" jsonschema:"how many bytes it wrote to stdout in all"`
	StderrBytes     int64        `json:"stderr_bytes"`
	StdoutTruncated bool         `json:"stdout_truncated" jsonschema:"stdout was longer than max_output_bytes: its middle was cut"`
	StderrTruncated bool         `json:"stderr_truncated"`
	NetworkDenied   []denialView `json:"network_denied,omitempty" jsonschema:"connections the network policy refused while it ran"`
}

// denialView is one refused destination.
type denialView struct {
	Host   string `json:"host"`
	Port   int    `json:"port,omitempty"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

func denialViews(ds []policy.Denial) []denialView {
	out := make([]denialView, 0, len(ds))
	for _, d := range ds {
		out = append(out, denialView{Host: d.Host, Port: d.Port, Reason: d.Reason, Count: d.Count})
	}
	return out
}

// request checks the shared options and makes the backend's request.
func (o *runOpts) request(args []string) (sandbox.ExecRequest, int, error) {
	req := sandbox.ExecRequest{Args: args, Dir: o.Cwd, Timeout: defaultTimeout}
	size := 0
	for _, a := range args {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return req, 0, fmt.Errorf("an argument contains a NUL byte, which no command can receive")
		}
	}
	if size > maxArgBytes {
		return req, 0, fmt.Errorf("the command is %d bytes, more than %d: write a long script to a file with file_write and run that", size, maxArgBytes)
	}
	if strings.IndexByte(o.Cwd, 0) >= 0 {
		return req, 0, fmt.Errorf("cwd contains a NUL byte")
	}
	for k, v := range o.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return req, 0, fmt.Errorf("env %q: a name is not empty and holds no '=' or NUL; a value holds no NUL", k)
		}
		req.Env = append(req.Env, k+"="+v)
	}
	if len(o.Stdin) > maxStdin {
		return req, 0, fmt.Errorf("stdin is %d bytes, more than %d: write it to a file with file_write and redirect from it", len(o.Stdin), maxStdin)
	}
	if o.Stdin != "" {
		req.Stdin = strings.NewReader(o.Stdin)
	}
	switch t := o.TimeoutSeconds; {
	case t < 0:
		return req, 0, fmt.Errorf("timeout_seconds %v: want a positive number of seconds", t)
	case t > maxTimeout.Seconds():
		return req, 0, fmt.Errorf("timeout_seconds %v: at most %v; run longer commands with process_start", t, maxTimeout.Seconds())
	case t > 0:
		req.Timeout = time.Duration(t * float64(time.Second))
	}
	limit := defaultOutput
	switch m := o.MaxOutputBytes; {
	case m < 0:
		return req, 0, fmt.Errorf("max_output_bytes %d: want a positive number", m)
	case m > maxOutput:
		return req, 0, fmt.Errorf("max_output_bytes %d: at most %d; redirect more to a file and read it in parts", m, maxOutput)
	case m > 0:
		limit = m
	}
	return req, limit, nil
}

// run runs one command to its end, sending progress notifications while
// it runs when the client asked for them; the client's cancellation (ctx)
// kills it.
func (s *Server) run(ctx context.Context, call *sdk.CallToolRequest, o runOpts, args []string) (*sdk.CallToolResult, execOut, error) {
	req, limit, err := o.request(args)
	if err != nil {
		return nil, execOut{}, err
	}
	bx, err := s.resolve(ctx, o.Sandbox)
	if err != nil {
		return nil, execOut{}, err
	}
	stdout, stderr := newHeadTail(limit), newHeadTail(limit)
	req.Stdout, req.Stderr = stdout, stderr
	stop := s.progress(ctx, call, func() string {
		return fmt.Sprintf("running: %d bytes of stdout, %d of stderr so far", stdout.Total(), stderr.Total())
	})
	res, err := handle.Open(ctx, s.b, bx.id).Exec(ctx, req)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil, execOut{}, fmt.Errorf("the command was cancelled and killed: %w", ctx.Err())
		}
		return nil, execOut{}, err
	}
	s.noteDenials(bx, res.NetworkDenied)
	out := execOut{Sandbox: bx.id, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled,
		DurationSeconds: res.Duration.Seconds(), StdoutBytes: stdout.Total(), StderrBytes: stderr.Total()}
	out.Stdout, out.StdoutTruncated = stdout.String()
	out.Stderr, out.StderrTruncated = stderr.String()
	if len(res.NetworkDenied) > 0 {
		out.NetworkDenied = denialViews(res.NetworkDenied)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out.text(req.Timeout, policy.DeniedSummary(res.NetworkDenied))}}}, out, nil
}

// text is the result as a model reads it.
func (o *execOut) text(timeout time.Duration, denied string) string {
	var b strings.Builder
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "timed out after %v and was killed (exit %d): pass a larger timeout_seconds, or run it with process_start\n", timeout, o.ExitCode)
	case o.Signal != "":
		fmt.Fprintf(&b, "killed by signal %s (exit %d)\n", o.Signal, o.ExitCode)
	default:
		fmt.Fprintf(&b, "exit %d\n", o.ExitCode)
	}
	if o.OOMKilled {
		b.WriteString("the sandbox's memory limit killed a process\n")
	}
	if o.Stdout != "" {
		b.WriteString("--- stdout ---\n" + o.Stdout)
		if !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if o.Stderr != "" {
		b.WriteString("--- stderr ---\n" + o.Stderr)
		if !strings.HasSuffix(o.Stderr, "\n") {
			b.WriteString("\n")
		}
	}
	if denied != "" {
		b.WriteString("--- the network policy refused ---\n" + denied + "\n(network_status shows what is allowed; the operator decides it)\n")
	}
	return b.String()
}

// progress sends a progress notification every progressEvery until the
// returned stop is called, when the call carries a progress token.
func (s *Server) progress(ctx context.Context, call *sdk.CallToolRequest, msg func() string) (stop func()) {
	if call == nil || call.Session == nil || call.Params == nil {
		return func() {}
	}
	token := call.Params.GetProgressToken()
	if token == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				err := call.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token,
					Progress: now.Sub(start).Seconds(), Message: msg()})
				if err != nil {
					s.log.Debug("mcp: progress notification failed", "err", err)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (s *Server) addExecTools() {
	bounds := " Output: at most max_output_bytes of each of stdout and stderr (default 32 KiB; the middle of longer output is cut and the result says how much). " +
		"Default timeout 120 s (at most 1800 s; longer: process_start). Progress is notified every second while it runs; cancelling the call kills the command. " +
		"It runs inside the sandbox with the sandbox's fixed mounts, network and limits; a non-zero exit is a result, not an error."
	addTool(s, &sdk.Tool{Name: "exec", Title: "Run a command",
		Description: "Run a command (an argv, no shell) inside a sandbox and return its exit status, stdout and stderr." + bounds},
		func(ctx context.Context, call *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, execOut, error) {
			if len(in.Argv) == 0 || in.Argv[0] == "" {
				return nil, execOut{}, fmt.Errorf("argv is empty: give the command and its arguments, e.g. [\"ls\", \"-l\"]; for a shell line use the shell tool")
			}
			return s.run(ctx, call, in.runOpts, in.Argv)
		})
	addTool(s, &sdk.Tool{Name: "shell", Title: "Run a shell command",
		Description: "Run a shell command line (sh -c) inside a sandbox and return its exit status, stdout and stderr." + bounds},
		func(ctx context.Context, call *sdk.CallToolRequest, in shellIn) (*sdk.CallToolResult, execOut, error) {
			if strings.TrimSpace(in.Command) == "" {
				return nil, execOut{}, fmt.Errorf("command is empty: give a shell command line, e.g. \"ls -l | head\"")
			}
			return s.run(ctx, call, in.runOpts, []string{"sh", "-c", in.Command})
		})
}
