package envd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
	"github.com/tent-sandbox/tent/serve/envd/processpb/processpbconnect"
)

// sandboxOn provisions a sandbox of a new backend of kind ("local" or
// supervised's), gone with the test.
func sandboxOn(t *testing.T, kind string) (sandbox.Backend, string) {
	t.Helper()
	ctx := context.Background()
	var b sandbox.Backend
	if kind == supervised.Name {
		sb, err := supervised.Open(t.TempDir(), supervised.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b = sb
	} else {
		l, err := sandbox.NewLocal(sandbox.LocalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		b = l
	}
	info, err := b.Provision(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = handleOf(t, b, info.ID).Terminate(context.Background()) })
	return b, info.ID
}

// TestInputCommandsHaveRealPids: on both backends, a command started with
// stdin, and one on a terminal, gets its real pid inside the sandbox (the
// one its shell prints, whose /proc/PID/cmdline is the command's); a
// second connection, to another handler, finds it by that pid, and its
// input reaches the command.
func TestInputCommandsHaveRealPids(t *testing.T) {
	for _, kind := range []string{"local", supervised.Name} {
		t.Run(kind, func(t *testing.T) {
			b, id := sandboxOn(t, kind)
			first, _ := serveWith(t, b, id)
			second, _ := serveWith(t, b, id)
			for _, pty := range []bool{false, true} {
				t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) { inputToRealPid(t, b, id, first, second, pty) })
			}
		})
	}
}

// inputToRealPid starts a command with stdin (or on a terminal) through
// first, and writes to it through second.
func inputToRealPid(t *testing.T, b sandbox.Backend, id string, first, second processpbconnect.ProcessClient, pty bool) {
	ctx := context.Background()
	yes := true
	req := &processpb.StartRequest{Stdin: &yes, Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo pid $$.; exec cat"}}}
	output := func(ev *events) string { return ev.stdout.String() }
	input := func(b []byte) *processpb.ProcessInput {
		return &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: b}}
	}
	if pty {
		req.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Rows: 24, Cols: 80}}
		output = func(ev *events) string { return ev.pty.String() }
		input = func(b []byte) *processpb.ProcessInput {
			return &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: b}}
		}
	}
	s, err := first.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	until(t, s, ev, func(ev *events) bool { return strings.Contains(output(ev), ".") })
	if want := fmt.Sprintf("pid %d.", ev.pid); !strings.Contains(output(ev), want) {
		t.Fatalf("start event's pid %d, the shell's output %q: want %q", ev.pid, output(ev), want)
	}
	var cmdline strings.Builder
	if _, err := handleOf(t, b, id).Exec(ctx, sandbox.ExecRequest{Args: []string{"cat", fmt.Sprintf("/proc/%d/cmdline", ev.pid)}, Stdout: &cmdline}); err != nil || cmdline.String() != "cat\x00" {
		t.Errorf("/proc/%d/cmdline inside: %q, %v; want the command's", ev.pid, cmdline.String(), err)
	}
	c, err := second.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(ev.pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cev := &events{}
	until(t, c, cev, func(ev *events) bool { return ev.pid != 0 })
	if cev.pid != ev.pid {
		t.Fatalf("the second connection found pid %d, want %d", cev.pid, ev.pid)
	}
	if _, err := second.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: input([]byte("from the second\n"))})); err != nil {
		t.Fatalf("input from the second connection: %v", err)
	}
	until(t, c, cev, func(ev *events) bool { return strings.Contains(output(ev), "from the second") })
	if pty {
		_, err = second.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: pidSel(ev.pid), Input: input([]byte("\x04"))})) // end of input
	} else {
		_, err = second.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(ev.pid)}))
	}
	if err != nil {
		t.Fatal(err)
	}
	toEnd(t, c, cev)
	if cev.end.GetExitCode() != 0 {
		t.Errorf("end: %v", cev.end)
	}
}
