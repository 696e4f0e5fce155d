package envd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
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

// addProc gives p a pid and registers it, within the sandbox's bound
// (ended processes kept for a Connect make room, oldest first).
func (bx *box) addProc(p *proc) error { return bx.addProcPID(p, 0) }

// addProcPID registers p as addProc does, with pid its pid (0: one of the
// handler's).
func (bx *box) addProcPID(p *proc, pid uint32) error {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.closed {
		return errGone()
	}
	if p.tag != nil {
		for _, q := range bx.procs {
			if q.tag != nil && *q.tag == *p.tag && q.running() {
				return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("process %d runs with tag %q", q.pid, *p.tag))
			}
		}
	}
	if len(bx.procs) >= bx.h.opts.MaxProcesses {
		var ended []*proc
		for _, q := range bx.procs {
			if !q.running() {
				ended = append(ended, q)
			}
		}
		slices.SortFunc(ended, func(a, b *proc) int { return int(int64(a.pid) - int64(b.pid)) })
		for _, q := range ended[:min(len(ended), len(bx.procs)-bx.h.opts.MaxProcesses+1)] {
			delete(bx.procs, q.pid)
		}
	}
	if len(bx.procs) >= bx.h.opts.MaxProcesses {
		return errResourceExhausted(fmt.Sprintf("the sandbox runs %d processes, its limit", len(bx.procs)))
	}
	if pid == 0 {
		bx.nextPID++
		pid = bx.nextPID
	} else if bx.procs[pid] != nil {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("process %d is known already", pid))
	}
	p.pid = pid
	bx.procs[p.pid] = p
	return nil
}

// removeProc forgets p (no-op when it is gone already).
func (bx *box) removeProc(p *proc) {
	bx.mu.Lock()
	if bx.procs[p.pid] == p {
		delete(bx.procs, p.pid)
	}
	bx.mu.Unlock()
}

// lookup finds the process sel names; ended ones only with ended.
func (bx *box) lookup(sel *processpb.ProcessSelector, ended bool) (*proc, error) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	var found *proc
	var what string
	switch s := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		what = fmt.Sprintf("pid %d", s.Pid)
		found = bx.procs[s.Pid]
	case *processpb.ProcessSelector_Tag:
		what = fmt.Sprintf("tag %q", s.Tag)
		for _, q := range bx.procs {
			if q.tag != nil && *q.tag == s.Tag && (found == nil || q.pid > found.pid) {
				found = q
			}
		}
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no process selected: give a pid or a tag"))
	}
	if found == nil || (!ended && !found.running()) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", what))
	}
	return found, nil
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
	xreq := sandbox.ExecRequest{Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), AsRoot: asRoot(ctx)}
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		if xreq.Dir, err = bx.resolve(ctx, cfg.GetCwd()); err != nil {
			return err
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
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("environment variable name %q", k))
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		xreq.Env = append(xreq.Env, k+"="+cfg.GetEnvs()[k])
	}
	pty := req.Msg.Pty != nil
	wantsInput := pty || req.Msg.Stdin == nil || req.Msg.GetStdin()
	if det, ok := bx.detacher(ctx); ok && !wantsInput {
		if done, err := s.startDetached(ctx, bx, det, cfg, xreq, req, stream); done {
			return err
		}
	}
	p := newProc(bx, cfg, req.Msg.Tag, pty)
	var inR *os.File
	if wantsInput {
		r, w, err := os.Pipe()
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		inR, p.in = r, w
		xreq.Stdin = r
	}
	// The command lives as long as the request's deadline allows, not as
	// long as the request.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if d, ok := ctx.Deadline(); ok {
		cancel()
		pctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	p.cancel = cancel
	if err := bx.addProc(p); err != nil {
		cancel()
		if inR != nil {
			inR.Close()
			p.in.Close()
		}
		return err
	}
	if pty {
		size := req.Msg.GetPty().GetSize()
		xreq.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: clampSize(size.GetRows()), Cols: clampSize(size.GetCols())}, Resize: p.resize}
		xreq.Stdout = &outWriter{p, kindPTY}
	} else {
		xreq.Stdout, xreq.Stderr = &outWriter{p, kindStdout}, &outWriter{p, kindStderr}
	}
	xreq.Signals = p.signals
	sub := p.subscribe()
	go p.run(pctx, xreq, inR)
	s.h.log.Debug("process started", "sandbox", bx.id, "pid", p.pid, "cmd", cfg.GetCmd(), "pty", pty)
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: ev}) }
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return p.follow(ctx, sub, send, keepaliveInterval(req.Header()))
}

// startDetached starts a command the supervisor owns (see detached.go)
// and follows it for the client. done is false when the supervisor could
// not start it (its table full, the sandbox paused, the command
// missing...): Start then runs it the handler's way, which reports such
// failures as the command's end.
func (s *processService) startDetached(ctx context.Context, bx *box, det detacher, cfg *processpb.ProcessConfig, xreq sandbox.ExecRequest,
	req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) (done bool, err error) {
	tag := ""
	if req.Msg.Tag != nil {
		tag = *req.Msg.Tag
		if _, err := bx.lookup(&processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}, false); err == nil {
			return true, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a process runs with tag %q", tag))
		}
	}
	if d, ok := ctx.Deadline(); ok {
		// The command lives as long as the request's deadline allows.
		xreq.Timeout = max(time.Until(d), time.Millisecond)
	}
	pid, err := bx.startDetached(ctx, det, xreq, tag)
	if err != nil && ctx.Err() != nil {
		// Whether it started is not known: not run a second time.
		return true, connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if err != nil {
		s.h.log.Debug("the supervisor did not start the command; the handler runs it", "sandbox", bx.id, "err", err)
		return false, nil
	}
	p := newProc(bx, cfg, req.Msg.Tag, false)
	p.det = det
	pctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if err := bx.addProcPID(p, uint32(pid)); err != nil {
		cancel()
		kctx, kcancel := context.WithTimeout(context.Background(), supervisorCallTimeout)
		_ = det.SignalProcess(kctx, pid, syscall.SIGKILL)
		kcancel()
		return true, err
	}
	sub := p.subscribe()
	go p.followDetached(pctx)
	s.h.log.Debug("process started by the supervisor", "sandbox", bx.id, "pid", p.pid, "cmd", cfg.GetCmd())
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: ev}) }
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		p.unsubscribe(sub)
		return true, err
	}
	return true, p.follow(ctx, sub, send, keepaliveInterval(req.Header()))
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
	p, err := bx.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	if err := bx.acquireStream(); err != nil {
		return err
	}
	defer bx.releaseStream()
	sub := p.subscribe()
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.ConnectResponse{Event: ev}) }
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return p.follow(ctx, sub, send, keepaliveInterval(req.Header()))
}

func (s *processService) List(ctx context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	var procs []*proc
	for _, p := range bx.procs {
		procs = append(procs, p)
	}
	bx.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return int(int64(a.pid) - int64(b.pid)) })
	out := &processpb.ListResponse{}
	for _, p := range procs {
		if p.running() {
			out.Processes = append(out.Processes, &processpb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
		}
	}
	return connect.NewResponse(out), nil
}

// input sends one ProcessInput to the process sel names.
func (s *processService) input(ctx context.Context, sel *processpb.ProcessSelector, in *processpb.ProcessInput) error {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return err
	}
	p, err := bx.lookup(sel, false)
	if err != nil {
		return err
	}
	switch in := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		return p.input(ctx, in.Stdin, false)
	case *processpb.ProcessInput_Pty:
		return p.input(ctx, in.Pty, true)
	}
	return connect.NewError(connect.CodeInvalidArgument, errors.New("no input: give stdin or pty"))
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
			if _, err := s.lookup(ctx, sel); err != nil {
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

// lookup finds a running process of the request's sandbox.
func (s *processService) lookup(ctx context.Context, sel *processpb.ProcessSelector) (*proc, error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, err
	}
	return bx.lookup(sel, false)
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
	p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(ctx, sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.pty {
		return nil, errFailedPrecondition("the process runs on a terminal: send it Ctrl-D (0x04) instead")
	}
	p.closeInput()
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := s.lookup(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil
	}
	if !p.pty {
		return nil, errFailedPrecondition(fmt.Sprintf("process %d has no terminal to resize", p.pid))
	}
	size := req.Msg.GetPty().GetSize()
	if size.GetRows() == 0 || size.GetCols() == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a terminal size needs rows and cols"))
	}
	p.setSize(ctx, sandbox.WindowSize{Rows: clampSize(size.GetRows()), Cols: clampSize(size.GetCols())})
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}
