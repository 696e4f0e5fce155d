package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Background commands. sandbox.Backend has no handle for a command that
// outlives a call, so this package keeps one: each is an Exec running in
// a goroutine of this server, its stdin fed from a bounded queue and its
// stdout and stderr (one stream, in the order written) kept in a bounded
// ring. They end with the server, and with their sandbox.

// process is one background command.
type process struct {
	id      string
	box     string
	command string
	started time.Time
	cancel  context.CancelFunc
	in      *inputQueue
	out     *ring
	done    chan struct{}
	// set before done is closed
	res *sandbox.ExecResult
	err error
}

func (p *process) kill() { p.cancel() }

// wait waits for the command's end, or ctx's.
func (p *process) wait(ctx context.Context) {
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

// ring keeps the last cap bytes written to it and counts every byte, so
// that a reader can ask for what followed an offset. Safe for concurrent
// use; Write never blocks the command.
type ring struct {
	mu      sync.Mutex
	buf     []byte
	cap     int
	total   int64
	changed chan struct{} // closed and replaced on each write
}

func newRing(n int) *ring { return &ring{cap: n, changed: make(chan struct{})} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += int64(len(p))
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.cap; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return len(p), nil
}

// since returns up to max bytes written from offset on, the offset after
// them, how many bytes after offset were already dropped, and a channel
// closed at the next write.
func (r *ring) since(offset int64, max int) (data []byte, next, dropped int64, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	if offset < first {
		dropped, offset = first-offset, first
	}
	if offset > r.total {
		offset = r.total
	}
	data = r.buf[offset-first:]
	if len(data) > max {
		data = data[:max]
	}
	return append([]byte(nil), data...), offset + int64(len(data)), dropped, r.changed
}

// inputQueue is a background command's stdin: what process_write sends,
// at most maxInputPending bytes not yet read by the command.
type inputQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
}

func newInputQueue() *inputQueue {
	q := &inputQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *inputQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.buf) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, q.buf)
	q.buf = q.buf[n:]
	return n, nil
}

// send queues data; close, after it, marks the end of the input.
func (q *inputQueue) send(data string, close bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("the command's input is already closed")
	}
	if len(q.buf)+len(data) > maxInputPending {
		return fmt.Errorf("the command has not read %d bytes of earlier input and at most %d may wait: it is not reading its input; send less, or later", len(q.buf), maxInputPending)
	}
	q.buf = append(q.buf, data...)
	q.closed = close
	q.cond.Broadcast()
	return nil
}

// end closes the queue for good (the command ended): Read returns EOF.
func (q *inputQueue) end() {
	q.mu.Lock()
	q.closed, q.buf = true, nil
	q.cond.Broadcast()
	q.mu.Unlock()
}

// startProcess starts a background command in bx.
func (s *Server) startProcess(bx *box, o runOpts, command string, args []string) (*process, error) {
	req, _, err := o.request(args)
	if err != nil {
		return nil, err
	}
	if o.TimeoutSeconds == 0 {
		req.Timeout = 0 // a background command runs until killed, or its sandbox's own limit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	running := 0
	for _, p := range s.procs {
		select {
		case <-p.done:
		default:
			running++
		}
	}
	if running >= MaxProcesses {
		return nil, fmt.Errorf("%d background commands are running, the most this server allows: process_kill one, or wait for one to end (process_list)", running)
	}
	// Forget the oldest ended records beyond the bound.
	for len(s.procs) >= maxProcessRecords {
		i := -1
		for j, p := range s.procs {
			select {
			case <-p.done:
				i = j
			default:
			}
			if i >= 0 {
				break
			}
		}
		if i < 0 {
			break
		}
		s.procs = append(s.procs[:i], s.procs[i+1:]...)
	}
	s.nextProc++
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{id: fmt.Sprintf("p%d", s.nextProc), box: bx.id, command: command, started: time.Now(),
		cancel: cancel, in: newInputQueue(), out: newRing(processBuffer), done: make(chan struct{})}
	req.Stdin = p.in
	req.Stdout, req.Stderr = p.out, p.out
	if o.Stdin != "" {
		_ = p.in.send(o.Stdin, false)
	}
	s.procs = append(s.procs, p)
	go func() {
		res, err := handle.Open(ctx, s.b, bx.id).Exec(ctx, req)
		p.in.end()
		if res != nil {
			s.noteDenials(bx, res.NetworkDenied)
		}
		p.res, p.err = res, err
		cancel()
		close(p.done)
	}()
	return p, nil
}

// lookupProcess finds a background command by id.
func (s *Server) lookupProcess(id string) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.id == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no background command %q: process_list shows them (ended ones are forgotten after %d newer)", id, maxProcessRecords)
}

// killProcessesOf kills the background commands of a sandbox.
func (s *Server) killProcessesOf(boxID string) {
	s.mu.Lock()
	var ps []*process
	for _, p := range s.procs {
		if p.box == boxID {
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

// processView is a background command's state.
type processView struct {
	ID       string `json:"id" jsonschema:"the id process_read, process_write and process_kill take"`
	Sandbox  string `json:"sandbox"`
	Command  string `json:"command"`
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"set once it ended: 128+N for signal N"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty" jsonschema:"why it could not run, when it could not"`
	// OutputBytes is every byte written so far.
	OutputBytes int64 `json:"output_bytes" jsonschema:"how many bytes of output it wrote in all"`
}

// view describes the command now.
func (p *process) view() processView {
	v := processView{ID: p.id, Sandbox: p.box, Command: p.command, Running: true}
	select {
	case <-p.done:
		v.Running = false
		if p.res != nil {
			v.ExitCode, v.Signal = ptr(p.res.ExitCode), p.res.Signal
		}
		if p.err != nil {
			v.Error = advise(p.err).Error()
		}
	default:
	}
	p.out.mu.Lock()
	v.OutputBytes = p.out.total
	p.out.mu.Unlock()
	return v
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
	ID string `json:"id" jsonschema:"the background command's id (from process_start)"`
}

type processReadIn struct {
	ID          string  `json:"id" jsonschema:"the background command's id (from process_start)"`
	Offset      int64   `json:"offset,omitempty" jsonschema:"read output from this byte on: the next_offset of the previous read (default 0, the start)"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 30) for new output or the end, when there is none yet"`
	MaxBytes    int     `json:"max_bytes,omitempty" jsonschema:"at most this many bytes (default 32768, at most 262144)"`
}

type processReadOut struct {
	processView
	Output     string `json:"output" jsonschema:"stdout and stderr, interleaved as written"`
	NextOffset int64  `json:"next_offset" jsonschema:"pass it as offset to read what follows"`
	Dropped    int64  `json:"dropped" jsonschema:"bytes after offset that were no longer kept (only the last 256 KiB are)"`
}

type processWriteIn struct {
	ID         string `json:"id" jsonschema:"the background command's id (from process_start)"`
	Input      string `json:"input" jsonschema:"text to send to its standard input (include the newline)"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close its standard input after this text (end of file)"`
}

type processListOut struct {
	Processes []processView `json:"processes"`
}

func (s *Server) addProcessTools() {
	addTool(s, &sdk.Tool{Name: "process_start", Title: "Start a background command",
		Description: "Start a shell command line (sh -c) in the background inside a sandbox and return its id at once: for servers, watchers and long builds. " +
			"Read its output with process_read, send it input with process_write, stop it with process_kill. " +
			fmt.Sprintf("At most %d run at once; the last 256 KiB of each one's output are kept. No timeout unless timeout_seconds is given. ", MaxProcesses) +
			"Implemented by this server over the sandbox's exec: the commands end when the server stops or the sandbox is killed."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processStartIn) (*sdk.CallToolResult, processView, error) {
			if strings.TrimSpace(in.Command) == "" {
				return nil, processView{}, fmt.Errorf("command is empty: give a shell command line")
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, processView{}, err
			}
			o := runOpts{Sandbox: in.Sandbox, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, TimeoutSeconds: in.TimeoutSeconds}
			p, err := s.startProcess(bx, o, in.Command, []string{"sh", "-c", in.Command})
			if err != nil {
				return nil, processView{}, err
			}
			return nil, p.view(), nil
		})
	addTool(s, &sdk.Tool{Name: "process_read", Title: "Read a background command's output",
		Description: "Return a background command's output from an offset on (stdout and stderr interleaved), whether it still runs, and its exit status once it ended. Pass the returned next_offset to read what follows; wait_seconds waits for new output.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processReadIn) (*sdk.CallToolResult, processReadOut, error) {
			p, err := s.lookupProcess(in.ID)
			if err != nil {
				return nil, processReadOut{}, err
			}
			max := defaultOutput
			switch {
			case in.MaxBytes < 0 || in.MaxBytes > processBuffer:
				return nil, processReadOut{}, fmt.Errorf("max_bytes %d: want 1 to %d", in.MaxBytes, processBuffer)
			case in.MaxBytes > 0:
				max = in.MaxBytes
			}
			if in.WaitSeconds < 0 || in.WaitSeconds > 30 {
				return nil, processReadOut{}, fmt.Errorf("wait_seconds %v: want 0 to 30", in.WaitSeconds)
			}
			if in.Offset < 0 {
				return nil, processReadOut{}, fmt.Errorf("offset %d: want 0 or a next_offset", in.Offset)
			}
			data, next, dropped, changed := p.out.since(in.Offset, max)
			if len(data) == 0 && in.WaitSeconds > 0 {
				t := time.NewTimer(time.Duration(in.WaitSeconds * float64(time.Second)))
				select {
				case <-changed:
				case <-p.done:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				data, next, dropped, _ = p.out.since(in.Offset, max)
			}
			return nil, processReadOut{processView: p.view(), Output: strings.ToValidUTF8(string(data), "\uFFFD"), NextOffset: next, Dropped: dropped}, nil
		})
	addTool(s, &sdk.Tool{Name: "process_write", Title: "Send input to a background command",
		Description: "Send text to a background command's standard input (include the newline); close_stdin ends its input. At most 1 MiB may wait unread."},
		func(_ context.Context, _ *sdk.CallToolRequest, in processWriteIn) (*sdk.CallToolResult, processView, error) {
			p, err := s.lookupProcess(in.ID)
			if err != nil {
				return nil, processView{}, err
			}
			select {
			case <-p.done:
				return nil, processView{}, fmt.Errorf("background command %s has ended: process_read shows how", p.id)
			default:
			}
			if err := p.in.send(in.Input, in.CloseStdin); err != nil {
				return nil, processView{}, err
			}
			return nil, p.view(), nil
		})
	addTool(s, &sdk.Tool{Name: "process_kill", Title: "Kill a background command",
		Description: "Kill a background command and its children, and return how it ended.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in processIDIn) (*sdk.CallToolResult, processView, error) {
			p, err := s.lookupProcess(in.ID)
			if err != nil {
				return nil, processView{}, err
			}
			p.kill()
			p.wait(ctx)
			return nil, p.view(), nil
		})
	addTool(s, &sdk.Tool{Name: "process_list", Title: "List background commands",
		Description: "List the background commands: running ones and recently ended ones.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, processListOut, error) {
			s.mu.Lock()
			ps := append([]*process(nil), s.procs...)
			s.mu.Unlock()
			out := processListOut{Processes: []processView{}}
			for _, p := range ps {
				out.Processes = append(out.Processes, p.view())
			}
			return nil, out, nil
		})
}
