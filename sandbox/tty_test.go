package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// lineWaiter reads a command's output as it comes and waits for a line.
type lineWaiter struct {
	lines chan string
	mu    sync.Mutex // all, written by the reader while the test reads it
	all   bytes.Buffer
}

// Write adds to the transcript.
func (lw *lineWaiter) Write(b []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.all.Write(b)
}

// transcript is everything read so far.
func (lw *lineWaiter) transcript() string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.all.String()
}

// newLineWaiter returns a writer for the command's output and a waiter.
func newLineWaiter() (*os.File, *lineWaiter, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	lw := &lineWaiter{lines: make(chan string, 64)}
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(io.TeeReader(r, lw))
		for sc.Scan() {
			lw.lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(lw.lines)
	}()
	return w, lw, nil
}

// await waits for a line equal to want (a hang guard only, never a
// measure of speed).
func (lw *lineWaiter) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lw.lines:
			if !ok {
				t.Fatalf("output ended before %q", want)
			}
			// A shell's prompt may precede the line (input typed ahead).
			for strings.HasPrefix(l, "$ ") {
				l = l[2:]
			}
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("no line %q in 60s", want)
		}
	}
}

// rest returns the remaining lines once the output has ended.
func (lw *lineWaiter) rest() []string {
	var out []string
	for l := range lw.lines {
		out = append(out, l)
	}
	return out
}

func TestCmdTerminal(t *testing.T) {
	// The command gets a terminal of the sandbox's own devpts, is the
	// leader of its session with it as controlling terminal, at the size
	// asked for; a resize reaches it as SIGWINCH; the exit status is its.
	resize := make(chan sandbox.WindowSize, 1)
	out, lw, err := newLineWaiter()
	if err != nil {
		t.Fatal(err)
	}
	script := `trap 'echo winch $(stty size)' WINCH
tty; stty size; test -t 0 && test -t 1 && test -t 2 && echo all-tty
ps -o sid= -p $$ 2>/dev/null | tr -d ' ' > /dev/null
echo ready
i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 7`
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", script)
	cmd.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: 33, Cols: 111}, Resize: resize}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	lw.await(t, "/dev/pts/0")
	lw.await(t, "33 111")
	lw.await(t, "all-tty")
	lw.await(t, "ready")
	resize <- sandbox.WindowSize{Rows: 40, Cols: 120}
	lw.await(t, "winch 40 120")
	if err := cmd.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if got := sandbox.ExitCode(err); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d (%v), want %d", got, err, 128+int(syscall.SIGTERM))
	}
}

func TestCmdTerminalExitStatusAndNoCallerDescriptors(t *testing.T) {
	// The command's stdio are the terminal only: the caller's files are
	// never passed into the sandbox, not even to the init.
	var out bytes.Buffer
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", `for f in 0 1 2; do readlink /proc/self/fd/$f; done; readlink /proc/1/fd/0 /proc/1/fd/1 2>&1 | head -c 0; exit 5`)
	cmd.TTY = &sandbox.Terminal{}
	cmd.Stdin, cmd.Stdout = strings.NewReader(""), &out
	err := cmd.Run()
	if got := sandbox.ExitCode(err); got != 5 {
		t.Fatalf("exit code %d (%v), want 5", got, err)
	}
	got := strings.Fields(strings.ReplaceAll(out.String(), "\r", ""))
	if strings.Join(got, " ") != "/dev/pts/0 /dev/pts/0 /dev/pts/0" {
		t.Errorf("fds 0-2: %q, want the terminal thrice", got)
	}
}

func TestExecTerminalJobControlAndSignals(t *testing.T) {
	// A shell on a terminal of a long-lived sandbox: job control works
	// (no "no job control" warning), Ctrl-C typed into the terminal
	// interrupts the foreground job and the shell survives, and a signal
	// sent with ExecRequest.Signals reaches the foreground job too.
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	out, lw, err := newLineWaiter()
	if err != nil {
		t.Fatal(err)
	}
	signals := make(chan os.Signal, 1)
	type result struct {
		res *sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
			Args: []string{"sh", "-i"}, Env: []string{"PS1=$ "},
			TTY: &sandbox.Terminal{}, Stdin: inR, Stdout: out, Signals: signals,
		})
		inR.Close()
		out.Close()
		done <- result{res, err}
	}()
	type_ := func(s string) {
		if _, err := inW.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	// The job prints its marker itself: the shell made it the terminal's
	// foreground process group before it ran.
	type_("sh -c 'echo go; exec sleep 60'\n")
	lw.await(t, "go")
	type_("\x03") // Ctrl-C: the terminal signals its foreground job
	type_("echo after-$?\n")
	lw.await(t, "after-130")
	type_("sh -c 'echo go2; exec sleep 60'\n")
	lw.await(t, "go2")
	// A signal of the caller's (SIGUSR1: no shell ignores it, unlike the
	// QUIT and TERM an interactive shell ignores and, in busybox, its jobs
	// may inherit) reaches the foreground job only: the shell stays.
	signals <- syscall.SIGUSR1
	type_("echo second-$?\n")
	lw.await(t, "second-138")
	type_("sh -c 'echo go3; exec sleep 60'\n")
	lw.await(t, "go3")
	type_("\x1a") // Ctrl-Z: the job stops, the shell takes the terminal back
	type_("echo stopped-$?; jobs\n")
	lw.await(t, "stopped-148")
	type_("kill -9 %1; wait; exit 3\n")
	type_("exit 3\n") // dash refuses the first exit while it believes a job is stopped
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the shell did not exit in 60s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3; output:\n%s", r.res.ExitCode, lw.transcript())
	}
	if all := lw.transcript(); strings.Contains(all, "job control") || !strings.Contains(all, "Stopped") {
		t.Errorf("the shell had no job control:\n%s", all)
	}
}

func TestSignalReachesTheWholeForegroundGroup(t *testing.T) {
	// Without a terminal, SIGINT goes to the process group the command
	// leads: sh and its sleep both get it, so "done" never prints.
	out, lw, err := newLineWaiter()
	if err != nil {
		t.Fatal(err)
	}
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", "echo ready; sleep 60; echo done")
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	lw.await(t, "ready")
	if err := cmd.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if rest := lw.rest(); len(rest) != 0 {
		t.Errorf("after SIGINT the command printed %q", rest)
	}
	if got := sandbox.ExitCode(err); got != 128+int(syscall.SIGINT) {
		t.Errorf("exit code %d (%v), want %d", got, err, 128+int(syscall.SIGINT))
	}
}
