package envd_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

func TestProcessAndStreamLimits(t *testing.T) {
	e := newEnv(t, envd.Options{MaxProcesses: 2, MaxStreams: 1}, nil)
	ctx := e.ctx()
	var pids []uint32
	for range 2 {
		s := e.start(ctx, "sleep 100", nil)
		defer s.Close()
		ev := &events{}
		until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
		pids = append(pids, ev.pid)
	}
	over := e.start(ctx, "true", nil)
	if over.Receive() || code(over.Err()) != connect.CodeResourceExhausted {
		t.Errorf("a third process: %v, want resource_exhausted", over.Err())
	}
	over.Close()
	// One Connect stream is allowed, a second is refused.
	c, err := e.proc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(pids[0])}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cev := &events{}
	until(t, c, cev, func(ev *events) bool { return ev.pid != 0 })
	c2, err := e.proc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(pids[1])}))
	if err != nil {
		t.Fatal(err)
	}
	if c2.Receive() || code(c2.Err()) != connect.CodeResourceExhausted {
		t.Errorf("a second stream: %v, want resource_exhausted", c2.Err())
	}
	c2.Close()
	if w, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/tmp"})); code(err) != connect.CodeResourceExhausted {
		t.Errorf("a watcher beyond the streams: %v %v, want resource_exhausted", w, err)
	}
	// A killed process makes room.
	if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(pids[0]), Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, c, cev)
	ok := e.run("echo room", nil)
	if ok.stdout.String() != "room\n" {
		t.Errorf("after a kill: %q %v", ok.stdout.String(), ok.end)
	}
}

// A command's lifetime is its Start request's deadline (the SDK's
// timeoutMs), as in envd.
func TestStartDeadlineKillsTheCommand(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s := e.start(ctx, "sleep 100", nil)
	defer s.Close()
	for s.Receive() {
	}
	if code(s.Err()) != connect.CodeDeadlineExceeded {
		t.Errorf("stream: %v, want deadline_exceeded", s.Err())
	}
	waitFor(t, "the command to be killed", func() bool {
		list, err := e.proc.List(e.ctx(), connect.NewRequest(&processpb.ListRequest{}))
		return err == nil && len(list.Msg.GetProcesses()) == 0
	})
}

func TestKeepaliveEvents(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 2.5"}}})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := e.proc.Start(e.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	toEnd(t, s, ev)
	if ev.keepalives < 1 || ev.end.GetExitCode() != 0 {
		t.Errorf("%d keepalives, end %v", ev.keepalives, ev.end)
	}
}

// Forget (the sandbox is being killed) kills the sandbox's processes;
// their clients are told the sandbox is gone (unavailable), not given
// an exit of the command's own.
func TestForgetKillsProcesses(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	s := e.start(e.ctx(), "sleep 100", nil)
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	e.h.Forget(e.id)
	for s.Receive() {
		if ev.add(eventOf(s)) {
			t.Fatalf("end after Forget: %v, want unavailable", ev.end)
		}
	}
	if code(s.Err()) != connect.CodeUnavailable {
		t.Errorf("stream after Forget: %v, want unavailable", s.Err())
	}
	list, err := e.proc.List(e.ctx(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 0 {
		t.Errorf("list after Forget: %v %v", list, err)
	}
}

// noBash is a backend whose sandboxes have no /bin/bash.
type noBash struct {
	sandbox.Backend
	mu   sync.Mutex
	seen []string
}

// notFound is the error of a missing command.
type notFound struct{}

func (notFound) Error() string        { return "/bin/bash: command not found" }
func (notFound) Is(target error) bool { return target == sandbox.ErrCommandNotFound }

func (b *noBash) Open(ctx context.Context, ref string) (sandbox.Handle, error) {
	h, err := b.Backend.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	return noBashHandle{h, b}, nil
}

// noBashHandle is a sandbox of noBash.
type noBashHandle struct {
	sandbox.Handle
	b *noBash
}

func (h noBashHandle) Start(ctx context.Context, req sandbox.ExecRequest, o sandbox.StartOptions) (sandbox.Process, error) {
	h.b.mu.Lock()
	h.b.seen = append(h.b.seen, req.Args[0])
	h.b.mu.Unlock()
	if req.Args[0] == "/bin/bash" {
		return nil, notFound{}
	}
	return h.Handle.Start(ctx, req, o)
}

func (h noBashHandle) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	h.b.mu.Lock()
	h.b.seen = append(h.b.seen, req.Args[0])
	h.b.mu.Unlock()
	if req.Args[0] == "/bin/bash" {
		return nil, notFound{}
	}
	return h.Handle.Exec(ctx, req)
}

// The SDKs run every command with /bin/bash -l -c; where a sandbox has
// no bash, /bin/sh runs it.
func TestShellFallsBackToSh(t *testing.T) {
	var nb *noBash
	e := newEnv(t, envd.Options{}, func(b sandbox.Backend) sandbox.Backend {
		nb = &noBash{Backend: b}
		return nb
	})
	ev := e.run("echo via $0", nil)
	if ev.stdout.String() != "via /bin/sh\n" || ev.end.GetExitCode() != 0 {
		t.Errorf("stdout %q, end %v", ev.stdout.String(), ev.end)
	}
	nb.mu.Lock()
	defer nb.mu.Unlock()
	if strings.Join(nb.seen, " ") != "/bin/bash /bin/sh" {
		t.Errorf("commands tried: %v", nb.seen)
	}
}

// Methods tent does not serve answer unimplemented (Connect) or 501.
func TestNotServed(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](e.srv.Client(), e.srv.URL+"/process.Process/Attach", connect.WithProtoJSON())
	if _, err := c.CallUnary(e.ctx(), connect.NewRequest(&emptypb.Empty{})); code(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), "tent does not serve process.Process.Attach") {
		t.Errorf("unknown procedure: %v", err)
	}
	for _, path := range []string{"/files/compose", "/envs", "/metrics", "/init"} {
		res, err := e.srv.Client().Post(e.srv.URL+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "tent does not serve") {
			t.Errorf("%s: %d %s", path, res.StatusCode, b)
		}
	}
	res, err := e.srv.Client().Get(e.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Errorf("health: %d", res.StatusCode)
	}
}
