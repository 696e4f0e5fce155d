package envd_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
	"github.com/tent-sandbox/tent/serve/envd/processpb/processpbconnect"
)

func TestStartStreamsOutputAndExit(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ev := e.run(`echo out; echo err >&2; echo "$FOO"; pwd; exit 3`, func(r *processpb.StartRequest) {
		r.Process.Envs = map[string]string{"FOO": "bar"}
		cwd := "/tmp"
		r.Process.Cwd = &cwd
	})
	if ev.pid == 0 || ev.stdout.String() != "out\nbar\n/tmp\n" || ev.stderr.String() != "err\n" {
		t.Errorf("pid %d, stdout %q, stderr %q", ev.pid, ev.stdout.String(), ev.stderr.String())
	}
	if end := ev.end; end.GetExitCode() != 3 || !end.GetExited() || end.GetStatus() != "exit status 3" || end.GetError() != "exit status 3" {
		t.Errorf("end: %v", end)
	}
	ok := e.run("true", nil)
	if end := ok.end; end.GetExitCode() != 0 || !end.GetExited() || end.Error != nil || end.GetStatus() != "exit status 0" {
		t.Errorf("end of true: %v", end)
	}
	if ok.pid == ev.pid {
		t.Errorf("two processes got pid %d", ev.pid)
	}
	// The shell reports a command it cannot find, as in E2B.
	nf := e.run("no-such-command-here", nil)
	if nf.end.GetExitCode() != 127 || !strings.Contains(nf.stderr.String(), "no-such-command-here") {
		t.Errorf("missing command: %v, stderr %q", nf.end, nf.stderr.String())
	}
	// A working directory that does not exist ends the process with an
	// error naming it.
	bad := e.run("true", func(r *processpb.StartRequest) {
		cwd := "/nonexistent-dir"
		r.Process.Cwd = &cwd
	})
	if bad.end.GetExited() || !strings.Contains(bad.end.GetError(), "/nonexistent-dir") {
		t.Errorf("bad cwd: %v", bad.end)
	}
}

func TestStdinAndCloseStdin(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	s := e.start(ctx, "cat; echo done", func(r *processpb.StartRequest) {
		yes := true
		r.Stdin = &yes
	})
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	send := func(b string) error {
		_, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte(b)}}}))
		return err
	}
	if err := send("hello\n"); err != nil {
		t.Fatal(err)
	}
	until(t, s, ev, func(ev *events) bool { return ev.stdout.String() == "hello\n" })
	_, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("x")}}}))
	if code(err) != connect.CodeFailedPrecondition {
		t.Errorf("pty input to a process without a terminal: %v", err)
	}
	if _, err := e.proc.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(ev.pid)})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, s, ev)
	if ev.stdout.String() != "hello\ndone\n" || ev.end.GetExitCode() != 0 {
		t.Errorf("stdout %q, end %v", ev.stdout.String(), ev.end)
	}
	if err := send("late"); code(err) != connect.CodeNotFound {
		t.Errorf("input to an ended process: %v, want not_found", err)
	}
	// Without stdin (the SDK's default), the command reads EOF and input
	// is refused.
	s2 := e.start(ctx, "cat; sleep 5", func(r *processpb.StartRequest) {
		no := false
		r.Stdin = &no
	})
	defer s2.Close()
	ev2 := &events{}
	until(t, s2, ev2, func(ev *events) bool { return ev.pid != 0 })
	_, err = e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev2.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	if code(err) != connect.CodeFailedPrecondition {
		t.Errorf("input to a process without stdin: %v, want failed_precondition", err)
	}
}

func TestSendSignal(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	for _, tc := range []struct {
		sig    processpb.Signal
		status string
	}{{processpb.Signal_SIGNAL_SIGTERM, "signal: terminated"}, {processpb.Signal_SIGNAL_SIGKILL, "signal: killed"}} {
		s := e.start(ctx, "sleep 100", nil)
		ev := &events{}
		until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
		if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(ev.pid), Signal: tc.sig})); err != nil {
			t.Fatal(err)
		}
		toEnd(t, s, ev)
		s.Close()
		if end := ev.end; end.GetExited() || end.GetExitCode() != -1 || end.GetStatus() != tc.status || end.GetError() != tc.status {
			t.Errorf("%v: end %v, want %s", tc.sig, end, tc.status)
		}
	}
	_, err := e.proc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(999), Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if code(err) != connect.CodeNotFound {
		t.Errorf("signal to no process: %v, want not_found (the SDK's kill() then says false)", err)
	}
	_, err = e.proc.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(1), Signal: processpb.Signal_SIGNAL_UNSPECIFIED}))
	if code(err) != connect.CodeUnimplemented {
		t.Errorf("unspecified signal: %v, want unimplemented", err)
	}
}

// A background process keeps running when its client goes away; what it
// writes meanwhile is kept for the next Connect, which also gets its
// end.
func TestReconnectToBackgroundProcess(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	sctx, cancel := context.WithCancel(ctx)
	tag := "job"
	s := e.start(sctx, `read x; echo "got $x"; touch /tmp/marker; read y; echo "then $y"`, func(r *processpb.StartRequest) {
		yes := true
		r.Stdin, r.Tag = &yes, &tag
	})
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	cancel() // the client disconnects
	s.Close()
	waitFor(t, "the client's stream to be dropped", func() bool { return envd.Subscribers(e.h, e.id, ev.pid) == 0 })
	list, err := e.proc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != ev.pid || ps[0].GetTag() != tag || ps[0].GetConfig().GetCmd() != "/bin/bash" {
		t.Fatalf("list: %v", ps)
	}
	if _, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: tagSel(tag), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("one\n")}}})); err != nil {
		t.Fatal(err)
	}
	// "got one" is written while nobody is connected.
	waitFor(t, "the marker", func() bool {
		_, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/marker"}))
		return err == nil
	})
	c, err := e.proc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: tagSel(tag)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cev := &events{}
	until(t, c, cev, func(ev *events) bool { return ev.stdout.String() == "got one\n" })
	if cev.pid != ev.pid {
		t.Errorf("connect's start event: pid %d, want %d", cev.pid, ev.pid)
	}
	if _, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("two\n")}}})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, c, cev)
	if cev.stdout.String() != "got one\nthen two\n" || cev.end.GetExitCode() != 0 {
		t.Errorf("connect: stdout %q, end %v", cev.stdout.String(), cev.end)
	}
	// Collected: the process is gone.
	c2, err := e.proc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(ev.pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Receive() || code(c2.Err()) != connect.CodeNotFound {
		t.Errorf("connect to a collected process: %v, want not_found", c2.Err())
	}
}

// A process that ends while nobody is connected keeps its output and end
// for a Connect.
func TestConnectToProcessEndedUnwatched(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	sctx, cancel := context.WithCancel(ctx)
	s := e.start(sctx, `read x; echo "bye $x"; exit 4`, func(r *processpb.StartRequest) {
		yes := true
		r.Stdin = &yes
	})
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	cancel()
	s.Close()
	waitFor(t, "the client's stream to be dropped", func() bool { return envd.Subscribers(e.h, e.id, ev.pid) == 0 })
	if _, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("now\n")}}})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the process to end", func() bool {
		list, err := e.proc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		return err == nil && len(list.Msg.GetProcesses()) == 0
	})
	c, err := e.proc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(ev.pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cev := &events{}
	toEnd(t, c, cev)
	if cev.stdout.String() != "bye now\n" || cev.end.GetExitCode() != 4 {
		t.Errorf("connect after the end: stdout %q, end %v", cev.stdout.String(), cev.end)
	}
}

func TestPTYWithResize(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	s, err := e.proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "stty size; read x; stty size"}},
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Rows: 24, Cols: 80}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return strings.Contains(ev.pty.String(), "24 80") })
	sel := pidSel(ev.pid)
	if _, err := e.proc.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Rows: 30, Cols: 100}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.proc.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel})); code(err) != connect.CodeFailedPrecondition {
		t.Errorf("close stdin of a terminal: %v, want failed_precondition", err)
	}
	if _, err := e.proc.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("\n")}}})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, s, ev)
	if out := ev.pty.String(); !strings.Contains(out, "30 100") || ev.end.GetExitCode() != 0 || ev.stdout.Len() != 0 {
		t.Errorf("pty output %q (stdout %q), end %v", out, ev.stdout.String(), ev.end)
	}
	// A process without a terminal cannot be resized.
	plain := e.start(ctx, "sleep 5", nil)
	defer plain.Close()
	pev := &events{}
	until(t, plain, pev, func(ev *events) bool { return ev.pid != 0 })
	_, err = e.proc.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: pidSel(pev.pid), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Rows: 30, Cols: 100}}}))
	if code(err) != connect.CodeFailedPrecondition {
		t.Errorf("resize without a terminal: %v, want failed_precondition", err)
	}
}

// StreamInput (client streaming) feeds a process; the binary Connect
// form works as the JSON one does.
func TestStreamInputAndBinaryForm(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	bin := processpbconnect.NewProcessClient(e.srv.Client(), e.srv.URL)
	ctx := e.ctx()
	yes := true
	s, err := bin.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "cat"}}, Stdin: &yes}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	in := bin.StreamInput(ctx)
	for _, m := range []*processpb.StreamInputRequest{
		{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: pidSel(ev.pid)}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("a")}}}}},
		{Event: &processpb.StreamInputRequest_Keepalive{Keepalive: &processpb.StreamInputRequest_KeepAlive{}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("b\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	until(t, s, ev, func(ev *events) bool { return ev.stdout.String() == "ab\n" })
	if _, err := bin.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(ev.pid)})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, s, ev)
	if ev.end.GetExitCode() != 0 {
		t.Errorf("end: %v", ev.end)
	}
	bad := bin.StreamInput(ctx)
	_ = bad.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: pidSel(999)}}})
	if _, err := bad.CloseAndReceive(); code(err) != connect.CodeNotFound {
		t.Errorf("stream input to no process: %v, want not_found", err)
	}
}

// TestSandboxKilledDuringCommand: a command's stream ends with
// unavailable, "killed or reached its end of life", when its sandbox is
// killed under it, as envd's connection drops with its sandbox (the
// SDKs raise their TimeoutError), never with an exit the SDKs would
// take for the command's own (CommandExitError).
func TestSandboxKilledDuringCommand(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	s := e.start(ctx, "sleep 60", nil)
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.pid != 0 })
	// What the server does to kill a sandbox.
	if err := handleOf(t, e.b, e.id).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	e.h.Forget(e.id)
	for s.Receive() {
		if ev.add(eventOf(s)) {
			t.Fatalf("the stream ended with an end event %v, want an error", ev.end)
		}
	}
	if err := s.Err(); code(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "killed or reached its end of life") {
		t.Fatalf("stream error %v (code %v), want unavailable: killed or reached its end of life", err, code(err))
	}
}

// TestCommandStartedWhilePaused: a command started while the sandbox is
// paused starts once it is resumed, as a frozen one goes on (the SDKs'
// commands.run(background) racing pause()); its start event, with its
// real pid, comes then.
func TestCommandStartedWhilePaused(t *testing.T) {
	waiting := make(chan struct{})
	var once sync.Once
	log := slog.New(onMessage{msg: "waiting for the sandbox to be resumed to start a command", f: func() { once.Do(func() { close(waiting) }) }})
	e := newEnv(t, envd.Options{Logger: log}, nil)
	if !e.b.Capabilities().Suspend {
		t.Skip("no cgroup freezer for sandboxes on this host")
	}
	ctx := e.ctx()
	if err := handleOf(t, e.b, e.id).Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	var serr error
	done := make(chan struct{})
	go func() { // the client's Start may wait for the first event
		defer close(done)
		s, err := e.proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo after the pause"}}}))
		if err != nil {
			serr = err
			return
		}
		defer s.Close()
		for s.Receive() && !ev.add(eventOf(s)) {
		}
		serr = s.Err()
	}()
	select {
	case <-waiting:
	case <-done:
		t.Fatalf("the stream ended while the sandbox was paused: %v, %v", serr, ev.end)
	}
	if _, err := handleOf(t, e.b, e.id).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if ev.pid == 0 || ev.stdout.String() != "after the pause\n" || ev.end.GetExitCode() != 0 {
		t.Errorf("pid %d, stdout %q, end %v (%v): want the command run once resumed", ev.pid, ev.stdout.String(), ev.end, serr)
	}
}

// onMessage is a slog.Handler calling f at each record of message msg.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// A client slower than its command gets every byte of the command's
// output, in order, however much more than the sandbox's ring (a MiB per
// stream) it writes: the stream holds the command back as a pipe would.
func TestSlowClientGetsAllOutput(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	const lines = 400000 // 2.7 MB, the ring's MiB more than twice
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	s := e.start(ctx, fmt.Sprintf("seq 1 %d", lines), nil)
	defer s.Close()
	ev := &events{}
	for s.Receive() {
		if ev.add(eventOf(s)) {
			break
		}
		time.Sleep(time.Millisecond) // slower than seq
	}
	if ev.end.GetExitCode() != 0 || !ev.end.GetExited() {
		t.Fatalf("end: %v (%v)", ev.end, s.Err())
	}
	if !bytes.Equal(ev.stdout.Bytes(), want.Bytes()) {
		t.Errorf("stdout: %d bytes, want seq's %d, all of them in order", ev.stdout.Len(), want.Len())
	}
}
