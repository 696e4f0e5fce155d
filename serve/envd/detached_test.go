package envd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
	"github.com/tent-sandbox/tent/serve/envd/processpb/processpbconnect"
)

// serveWith serves sandbox id of b with a new Handler, as a restarted
// server would; the returned func stops it (Close: a server stopping
// with --keep-sandboxes).
func serveWith(t *testing.T, b sandbox.Backend, id string) (processpbconnect.ProcessClient, func()) {
	t.Helper()
	h := envd.New(b, envd.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeSandbox(w, r, id) }))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			h.Close()
			srv.Close()
		}
	}
	t.Cleanup(stop)
	return processpbconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON()), stop
}

// TestDetachedCommandsOutliveTheHandler: over the supervised backend (tent
// serve's), every command is the supervisor's, with its real pid, stdin
// or not: it goes on when the handler stops (a server stopping with
// --keep-sandboxes), a new handler lists it, a Connect gets the output
// no earlier client got (ProcessInfo.Taken), then its exit, and input
// reaches one with stdin.
func TestDetachedCommandsOutliveTheHandler(t *testing.T) {
	ctx := context.Background()
	b, err := supervised.Open(t.TempDir(), supervised.Options{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.Provision(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sb, err := b.Sandbox(context.Background(), info.ID); err == nil {
			_ = sb.Terminate(context.Background())
		}
	})
	sh := func(script string) string {
		t.Helper()
		var out strings.Builder
		res, err := handleOf(t, b, info.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", script, err, res)
		}
		return strings.TrimSpace(out.String())
	}

	client, stop := serveWith(t, b, info.ID)
	tag := "job"
	no := false
	s, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{Stdin: &no, Tag: &tag, Process: &processpb.ProcessConfig{Cmd: "/bin/bash",
		Args: []string{"-l", "-c", "echo a; echo e >&2; until [ -e /tmp/go ]; do sleep 0.05; done; echo b; exit 3"}}}))
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return ev.stdout.String() == "a\n" && ev.stderr.String() == "e\n" })
	if ev.pid == 0 || ev.pid >= 1<<22 {
		t.Fatalf("pid %d: want the command's real pid", ev.pid)
	}
	if got := sh("tr '\\0' ' ' < /proc/" + strconv.Itoa(int(ev.pid)) + "/cmdline"); !strings.Contains(got, "until [ -e /tmp/go ]") {
		t.Errorf("/proc/%d inside: %q, want the command", ev.pid, got)
	}
	// Another start with the same tag while it runs is refused.
	if s2, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{Stdin: &no, Tag: &tag, Process: &processpb.ProcessConfig{Cmd: "true"}})); err == nil {
		if s2.Receive() || code(s2.Err()) != connect.CodeAlreadyExists {
			t.Errorf("a second command tagged %q: %v, want already_exists", tag, s2.Err())
		}
		s2.Close()
	}
	// With stdin it is the supervisor's too.
	yes := true
	s3, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{Stdin: &yes, Process: &processpb.ProcessConfig{Cmd: "cat"}}))
	if err != nil {
		t.Fatal(err)
	}
	ev3 := &events{}
	until(t, s3, ev3, func(ev *events) bool { return ev.pid != 0 })
	if ev3.pid == 0 || ev3.pid >= 1<<22 || ev3.pid == ev.pid {
		t.Errorf("a command with stdin: pid %d, want its real pid", ev3.pid)
	}

	stop() // the server stops, keeping its sandboxes
	s.Close()
	s3.Close()
	sb, err := b.Sandbox(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := sb.Processes(ctx)
	if err != nil || len(procs) != 2 || procs[0].Pid != int(ev.pid) || !procs[0].Running || procs[0].Tag != tag ||
		procs[1].Pid != int(ev3.pid) || !procs[1].Running || !procs[1].Stdin {
		t.Fatalf("the supervisor's commands after the handler stopped: %+v, %v", procs, err)
	}

	client, _ = serveWith(t, b, info.ID)
	list, err := client.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ps := list.Msg.GetProcesses(); len(ps) != 2 || ps[0].GetPid() != ev.pid || ps[0].GetTag() != tag || ps[0].GetConfig().GetCmd() != "/bin/bash" ||
		ps[1].GetPid() != ev3.pid || ps[1].GetConfig().GetCmd() != "cat" {
		t.Fatalf("a new handler's list: %v", ps)
	}
	// The command with stdin takes input from the new handler.
	c3, err := client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(ev3.pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	cev3 := &events{}
	until(t, c3, cev3, func(ev *events) bool { return ev.pid != 0 })
	if _, err := client.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev3.pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("in\n")}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(ev3.pid)})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, c3, cev3)
	if cev3.stdout.String() != "in\n" || cev3.end.GetExitCode() != 0 {
		t.Errorf("the command with stdin after the restart: stdout %q, end %v", cev3.stdout.String(), cev3.end)
	}
	c, err := client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: tagSel(tag)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cev := &events{}
	until(t, c, cev, func(ev *events) bool { return ev.pid != 0 })
	sh("touch /tmp/go")
	toEnd(t, c, cev)
	if cev.pid != ev.pid || cev.stdout.String() != "b\n" || cev.stderr.String() != "" || cev.end.GetExitCode() != 3 {
		t.Errorf("connect after the restart: pid %d, stdout %q, stderr %q, end %v; want only what no client got, and exit 3", cev.pid, cev.stdout.String(), cev.stderr.String(), cev.end)
	}

	// A signal reaches a detached command.
	s4, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{Stdin: &no, Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s4.Close()
	ev4 := &events{}
	until(t, s4, ev4, func(ev *events) bool { return ev.pid != 0 })
	if _, err := client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: pidSel(ev4.pid), Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	toEnd(t, s4, ev4)
	if ev4.end.GetStatus() != "signal: killed" {
		t.Errorf("after SIGKILL: %v", ev4.end)
	}

	// A command whose sandbox is killed under it has no status of its
	// own: its stream ends unavailable (the SDKs' TimeoutError, "the
	// sandbox was killed"), not with an exit status.
	s5, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{Stdin: &no, Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s5.Close()
	ev5 := &events{}
	until(t, s5, ev5, func(ev *events) bool { return ev.pid != 0 })
	if err := handleOf(t, b, info.ID).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	for s5.Receive() {
		ev5.add(eventOf(s5))
	}
	if ev5.end != nil || code(s5.Err()) != connect.CodeUnavailable {
		t.Errorf("a command whose sandbox was killed: end %v, %v; want the stream unavailable", ev5.end, s5.Err())
	}
}
