package envd_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb/filesystempbconnect"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
	"github.com/tent-sandbox/tent/serve/envd/processpb/processpbconnect"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// env is one sandbox served by a Handler behind an httptest server, and
// Connect clients of it in the JSON form the E2B SDKs use.
type env struct {
	t    *testing.T
	b    sandbox.Backend
	id   string
	h    *envd.Handler
	srv  *httptest.Server
	proc processpbconnect.ProcessClient
	fs   filesystempbconnect.FilesystemClient
}

// newEnv provisions a sandbox of a new Local backend (wrapped by wrap
// when it is not nil) and serves it.
func newEnv(t *testing.T, opts envd.Options, wrap func(sandbox.Backend) sandbox.Backend) *env {
	t.Helper()
	return newEnvSpec(t, sandbox.Spec{}, opts, wrap)
}

// newEnvSpec is newEnv with a sandbox of spec.
func newEnvSpec(t *testing.T, spec sandbox.Spec, opts envd.Options, wrap func(sandbox.Backend) sandbox.Backend) *env {
	t.Helper()
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	info, err := l.Provision(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var b sandbox.Backend = l
	if wrap != nil {
		b = wrap(l)
	}
	e := &env{t: t, b: b, id: info.ID, h: envd.New(b, opts)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.h.ServeSandbox(w, r, e.id)
	}))
	t.Cleanup(func() {
		e.h.Close()
		e.srv.Close()
	})
	e.proc = processpbconnect.NewProcessClient(e.srv.Client(), e.srv.URL, connect.WithProtoJSON())
	e.fs = filesystempbconnect.NewFilesystemClient(e.srv.Client(), e.srv.URL, connect.WithProtoJSON())
	return e
}

// ctx is a context for one test step.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// events is what one process stream delivered.
type events struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	end                 *processpb.ProcessEvent_EndEvent
	keepalives          int
}

// add records one event; it reports the end.
func (ev *events) add(e *processpb.ProcessEvent) bool {
	switch x := e.GetEvent().(type) {
	case *processpb.ProcessEvent_Start:
		ev.pid = x.Start.GetPid()
	case *processpb.ProcessEvent_Data:
		ev.stdout.Write(x.Data.GetStdout())
		ev.stderr.Write(x.Data.GetStderr())
		ev.pty.Write(x.Data.GetPty())
	case *processpb.ProcessEvent_End:
		ev.end = x.End
		return true
	case *processpb.ProcessEvent_Keepalive:
		ev.keepalives++
	}
	return false
}

// stream is a process stream of either kind.
type stream interface {
	Receive() bool
	Err() error
}

// eventOf returns the event a Start or Connect stream just received.
func eventOf(s stream) *processpb.ProcessEvent {
	switch s := s.(type) {
	case *connect.ServerStreamForClient[processpb.StartResponse]:
		return s.Msg().GetEvent()
	case *connect.ServerStreamForClient[processpb.ConnectResponse]:
		return s.Msg().GetEvent()
	}
	panic("not a process stream")
}

// until reads s until stop says so after an event or the end, and
// returns what it read; it fails the test if the stream ends first.
func until(t *testing.T, s stream, ev *events, stop func(*events) bool) {
	t.Helper()
	for s.Receive() {
		end := ev.add(eventOf(s))
		if stop(ev) {
			return
		}
		if end {
			break
		}
	}
	t.Fatalf("stream ended (%v) before the expected event; stdout %q stderr %q pty %q end %v", s.Err(), ev.stdout.String(), ev.stderr.String(), ev.pty.String(), ev.end)
}

// toEnd reads s to its end event.
func toEnd(t *testing.T, s stream, ev *events) {
	t.Helper()
	until(t, s, ev, func(ev *events) bool { return ev.end != nil })
}

// start starts a shell command as the SDK does (bash -l -c).
func (e *env) start(ctx context.Context, cmd string, mod func(*processpb.StartRequest)) *connect.ServerStreamForClient[processpb.StartResponse] {
	e.t.Helper()
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}}
	if mod != nil {
		mod(req)
	}
	s, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// run runs a shell command to its end.
func (e *env) run(cmd string, mod func(*processpb.StartRequest)) *events {
	e.t.Helper()
	s := e.start(e.ctx(), cmd, mod)
	defer s.Close()
	ev := &events{}
	toEnd(e.t, s, ev)
	return ev
}

// code is the Connect code of err (CodeUnknown for another error, 0 for
// nil).
func code(err error) connect.Code {
	if err == nil {
		return 0
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.CodeUnknown
}

func pidSel(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// handleOf opens a sandbox of a backend, failing the test otherwise.
var handleOf = sandboxtest.Handle
