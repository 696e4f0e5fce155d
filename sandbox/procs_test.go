package sandbox_test

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A sandbox's processes end with it, leaving nothing in the process that
// held its table: their stdin pipes, terminal relays, output rings and
// goroutines go, and their Wait says the sandbox ended under them.
func TestProcessesEndWithTheirSandbox(t *testing.T) {
	ctx := context.Background()
	warm := provision(t, sandbox.Spec{})
	if p, err := warm.StartProcess(ctx, sandbox.ExecRequest{Args: []string{"true"}}, sandbox.StartOptions{Stdin: true}); err != nil {
		t.Fatal(err)
	} else if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Wait returns at the exit; the table closes the command's stdin
	// just after (see reap): count once it has.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ps, _ := warm.Processes(ctx); len(ps) == 1 && !ps[0].Stdin {
			break
		}
	}
	fds, goroutines := openFDs(t), runtime.NumGoroutine()

	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var procs []sandbox.Process
	for _, req := range []sandbox.ExecRequest{
		{Args: []string{"cat"}},
		{Args: []string{"cat"}, TTY: &sandbox.Terminal{}},
		{Args: []string{"sleep", "60"}},
	} {
		p, err := sb.StartProcess(ctx, req, sandbox.StartOptions{Stdin: req.Args[0] == "cat"})
		if err != nil {
			t.Fatalf("StartProcess(%q): %v", req.Args, err)
		}
		procs = append(procs, p)
	}
	if err := procs[0].WriteStdin(ctx, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := sb.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if res, err := p.Wait(ctx); !errors.Is(err, sandbox.ErrTerminated) {
			t.Errorf("Wait of %d once its sandbox ended: %+v, %v; want ErrTerminated", p.Pid(), res, err)
		}
		if err := p.WriteStdin(ctx, []byte("late")); !errors.Is(err, sandbox.ErrNoProcess) {
			t.Errorf("WriteStdin of %d once its sandbox ended: %v, want ErrNoProcess", p.Pid(), err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFDs(t); n > fds {
		t.Errorf("descriptors: %d before, %d after", fds, n)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
}

// A command that does not read its stdin blocks no writer: a write
// beyond the bound fails at once with ErrStdinFull, the table still
// answers (tent ps), and the command's end drops what waits; a write then
// is ErrNoProcess.
func TestProcessBlockedStdinWrite(t *testing.T) {
	ctx := context.Background()
	sb := provision(t, sandbox.Spec{})
	p, err := sb.StartProcess(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "read go; echo ready; exec sleep 600"}},
		sandbox.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// "go\n" reaches the command; the rest fills the pipe, which nobody
	// reads, and waits in the queue.
	if err := p.WriteStdin(ctx, append([]byte("go\n"), make([]byte, 1<<20-3)...)); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); ; {
		o, err := p.ReadOutput(ctx, 1, off)
		if err != nil || o.End {
			t.Fatalf("ReadOutput: %+v, %v", o, err)
		}
		if off += int64(len(o.Data)); off >= int64(len("ready\n")) {
			break
		}
	}
	if err := p.WriteStdin(ctx, make([]byte, 4<<20)); !errors.Is(err, sandbox.ErrStdinFull) {
		t.Errorf("a write beyond the bound: %v, want ErrStdinFull", err)
	}
	procs, err := sb.Processes(ctx)
	if err != nil || len(procs) != 1 || !procs[0].Stdin || !procs[0].Running {
		t.Errorf("Processes while a write is blocked: %+v, %v", procs, err)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 137 {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	if err := p.WriteStdin(ctx, []byte("late")); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("a write once the command ended: %v, want ErrNoProcess", err)
	}
}
