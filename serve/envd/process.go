package envd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// processService serves process.Process.
type processService struct{ h *Handler }

func errFailedPrecondition(msg string) error {
	return connect.NewError(connect.CodeFailedPrecondition, errors.New(msg))
}

func errResourceExhausted(msg string) error {
	return connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
}

// keepaliveHeader is the SDKs' request for keepalive events on a stream,
// every that many seconds.
const keepaliveHeader = "Keepalive-Ping-Interval"

// keepaliveInterval reads keepaliveHeader (0: none), at least a second.
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get(keepaliveHeader))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// keepalive times the keepalive events of one stream.
type keepalive struct {
	t *time.Timer
	d time.Duration
}

func newKeepalive(d time.Duration) *keepalive {
	if d <= 0 {
		return &keepalive{}
	}
	return &keepalive{t: time.NewTimer(d), d: d}
}

func (k *keepalive) c() <-chan time.Time {
	if k.t == nil {
		return nil
	}
	return k.t.C
}

func (k *keepalive) reset() {
	if k.t != nil {
		k.t.Reset(k.d)
	}
}

func (k *keepalive) stop() {
	if k.t != nil {
		k.t.Stop()
	}
}

// execRequest is the ExecRequest of cfg for the request's user: its
// working directory resolved as envd does, root's in /root, its
// environment in a stable order.
func (bx *box) execRequest(ctx context.Context, cfg *processpb.ProcessConfig) (sandbox.ExecRequest, error) {
	xreq := sandbox.ExecRequest{Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), AsRoot: asRoot(ctx)}
	var err error
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		if xreq.Dir, err = bx.resolve(ctx, cfg.GetCwd()); err != nil {
			return xreq, err
		}
	} else if xreq.AsRoot && bx.hasRootHome(ctx) {
		xreq.Dir = rootHome
	}
	if xreq.AsRoot {
		xreq.Env = append(xreq.Env, rootEnv...)
	}
	keys := make([]string, 0, len(cfg.GetEnvs()))
	for k := range cfg.GetEnvs() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return xreq, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("environment variable name %q", k))
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		xreq.Env = append(xreq.Env, k+"="+cfg.GetEnvs()[k])
	}
	return xreq, nil
}

func (s *processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return err
	}
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no command"))
	}
	xreq, err := bx.execRequest(ctx, cfg)
	if err != nil {
		return err
	}
	pty := req.Msg.Pty != nil
	if pty {
		size := req.Msg.GetPty().GetSize()
		xreq.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: clampSize(size.GetRows()), Cols: clampSize(size.GetCols())}}
	}
	if d, ok := ctx.Deadline(); ok {
		// The command lives as long as the request's deadline allows, not
		// as long as the request.
		xreq.Timeout = max(time.Until(d), time.Millisecond)
	}
	o := sandbox.StartOptions{Stdin: pty || req.Msg.Stdin == nil || req.Msg.GetStdin()}
	if req.Msg.Tag != nil {
		o.Tag = *req.Msg.Tag
	}
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: ev}) }
	p, err := bx.start(ctx, xreq, o)
	if err != nil {
		return s.startFailed(ctx, bx, err, send)
	}
	c := &cmd{pid: p.Pid(), config: cfg, tag: req.Msg.Tag, pty: pty}
	if err := bx.add(c); err != nil {
		return err
	}
	s.h.log.Debug("process started", "sandbox", bx.id, "pid", c.pid, "cmd", cfg.GetCmd(), "pty", pty)
	if err := send(startEvent(c.pid)); err != nil {
		return err
	}
	return bx.follow(ctx, c, p, [2]int64{}, send, keepaliveInterval(req.Header()))
}

// startFailed answers a Start whose command did not start: a refusal
// (its bounds, its tag, the sandbox gone, the request's end) as an error;
// a command that could not run (a missing working directory...) as its
// end, as envd reports it.
func (s *processService) startFailed(ctx context.Context, bx *box, err error, send func(*processpb.ProcessEvent) error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case ctx.Err() != nil:
		// Whether it started is not known.
		return rpcError(fmt.Errorf("%w: %w", ctx.Err(), err))
	case errors.Is(err, sandbox.ErrUnsupported):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case bx.ended(ctx):
		return errSandboxGone()
	}
	s.h.log.Debug("process did not start", "sandbox", bx.id, "err", err)
	if err := send(startEvent(0)); err != nil {
		return err
	}
	return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: endEvent(nil, err)}})
}

// startEvent is the event that opens a command's stream.
func startEvent(pid int) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: uint32(pid)}}}
}

// clampSize keeps a terminal dimension within what the kernel takes (0:
// the default).
func clampSize(n uint32) uint16 {
	return uint16(min(n, 0xffff))
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return err
	}
	c, p, err := bx.lookup(ctx, req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	if err := bx.acquireStream(); err != nil {
		return err
	}
	defer bx.releaseStream()
	bx.mu.Lock()
	from := c.sent
	bx.mu.Unlock()
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.ConnectResponse{Event: ev}) }
	if err := send(startEvent(c.pid)); err != nil {
		return err
	}
	return bx.follow(ctx, c, p, from, send, keepaliveInterval(req.Header()))
}

func (s *processService) List(ctx context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := bx.processes(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	slices.SortFunc(infos, func(a, b sandbox.ProcessInfo) int { return a.Pid - b.Pid })
	out := &processpb.ListResponse{}
	for _, pi := range infos {
		if pi.Running {
			c := bx.cmdFor(pi)
			out.Processes = append(out.Processes, &processpb.ProcessInfo{Config: c.config, Pid: uint32(c.pid), Tag: c.tag})
		}
	}
	return connect.NewResponse(out), nil
}

// input sends one ProcessInput to the process sel names.
func (s *processService) input(ctx context.Context, sel *processpb.ProcessSelector, in *processpb.ProcessInput) error {
	c, p, err := s.lookup(ctx, sel)
	if err != nil {
		return err
	}
	var b []byte
	switch in := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		if c.pty {
			return errFailedPrecondition("the process runs on a terminal: send its input as pty")
		}
		b = in.Stdin
	case *processpb.ProcessInput_Pty:
		if !c.pty {
			return errFailedPrecondition("the process has no terminal: send its input as stdin")
		}
		b = in.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no input: give stdin or pty"))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	err = p.WriteStdin(ctx, b)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrInvalidSpec):
		return errFailedPrecondition(fmt.Sprintf("the input of process %d is closed (or was not asked for: start it with stdin)", c.pid))
	case errors.Is(err, sandbox.ErrStdinFull), errors.Is(err, context.DeadlineExceeded):
		return errResourceExhausted(fmt.Sprintf("process %d does not read its input (at most 1 MiB of it may wait unread)", c.pid))
	}
	return rpcError(err)
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	if err := s.input(ctx, req.Msg.GetProcess(), req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var sel *processpb.ProcessSelector
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			sel = ev.Start.GetProcess()
			if _, _, err := s.lookup(ctx, sel); err != nil {
				return nil, err
			}
		case *processpb.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start event naming the process"))
			}
			if err := s.input(ctx, sel, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *processpb.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty stream input event"))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// lookup finds a running process of the request's sandbox (an operation
// on one that has just ended fails with not_found).
func (s *processService) lookup(ctx context.Context, sel *processpb.ProcessSelector) (*cmd, sandbox.Process, error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, nil, err
	}
	return bx.lookup(ctx, sel, false)
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("signal %v is not served: SIGTERM and SIGKILL are", req.Msg.GetSignal()))
	}
	_, p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.Signal(ctx, sig); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	c, p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if c.pty {
		return nil, errFailedPrecondition("the process runs on a terminal: send it Ctrl-D (0x04) instead")
	}
	// Closing a stdin that is closed (or was never open) does nothing.
	if err := p.CloseStdin(ctx); err != nil && !errors.Is(err, sandbox.ErrInvalidSpec) {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	c, p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil
	}
	if !c.pty {
		return nil, errFailedPrecondition(fmt.Sprintf("process %d has no terminal to resize", c.pid))
	}
	size := req.Msg.GetPty().GetSize()
	if size.GetRows() == 0 || size.GetCols() == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a terminal size needs rows and cols"))
	}
	if err := p.Resize(ctx, sandbox.WindowSize{Rows: clampSize(size.GetRows()), Cols: clampSize(size.GetCols())}); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}
