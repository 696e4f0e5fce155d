package backendtest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// Exec is Start + Wait: while an Exec'd command runs, a second Handle
// lists it and finds it by its pid, and signals it; its record goes when
// its Exec returns (the table keeps no finished Exec).
func execIsAProcess(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	pr, pw := io.Pipe()
	type done struct {
		res *sandbox.ExecResult
		err error
	}
	ran := make(chan done, 1)
	go func() {
		res, err := on(t, b, s.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo $$; exec sleep 600"}, Stdout: pw})
		pw.Close()
		ran <- done{res, err}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the Exec'd command's pid: %q, %v", line, err)
	}
	second := on(t, b, s.ID)
	if pi := find(t, second, pid); !pi.Running || !pi.Exec || pi.Args[0] != "sh" {
		t.Errorf("an Exec'd command listed while it runs: %+v", pi)
	}
	p, err := second.Process(ctx, pid)
	if err != nil {
		t.Fatalf("Process(%d) of an Exec'd command from a second handle: %v", pid, err)
	}
	if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	d := <-ran
	if d.err != nil || d.res.ExitCode != 128+int(syscall.SIGTERM) {
		t.Fatalf("Exec signalled through its Process: %+v, %v", d.res, d.err)
	}
	if _, err := second.Process(ctx, pid); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("Process(%d) once its Exec returned: %v, want ErrNoProcess (no record kept)", pid, err)
	}
	procs, err := second.Processes(ctx)
	if err != nil || len(procs) != 0 {
		t.Errorf("Processes once the Exec returned: %+v, %v; want none", procs, err)
	}
}

// maxStdin is the documented bound of a process's unread input.
const maxStdin = 1 << 20

// A command that never reads its stdin holds back no writer: writes of
// up to maxStdin bytes in all are taken at once, and the next
// fails at once with ErrStdinFull; the command's end drops what waits.
func processStdinBound(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	s := provision(t, b, sandbox.Spec{})
	h := on(t, b, s.ID)
	p, err := h.Start(ctx, sandbox.ExecRequest{Args: []string{"sleep", "600"}}, sandbox.StartOptions{Stdin: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	piece := make([]byte, 64<<10)
	for n := 0; n < maxStdin; n += len(piece) {
		if err := p.WriteStdin(ctx, piece); err != nil {
			t.Fatalf("WriteStdin with %d bytes unread: %v, want it taken (the bound is %d)", n, err, maxStdin)
		}
	}
	if err := p.WriteStdin(ctx, []byte("x")); !errors.Is(err, sandbox.ErrStdinFull) {
		t.Fatalf("WriteStdin past the bound: %v, want ErrStdinFull", err)
	}
	if pi := find(t, h, p.Pid()); !pi.Running || !pi.Stdin {
		t.Errorf("listed with its input unread: %+v", pi)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 137 {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	if err := p.WriteStdin(ctx, []byte("x")); !errors.Is(err, sandbox.ErrNoProcess) {
		t.Errorf("WriteStdin once exited: %v, want ErrNoProcess", err)
	}
}
