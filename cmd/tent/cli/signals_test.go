package cli

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestSignalsReachTheForegroundGroup(t *testing.T) {
	// SIGINT (or SIGTERM) to tent run reaches sh and its sleep alike:
	// "done" never prints, and tent exits with the command's 128+N.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, stdout, stderr := startPiped(t, "run", "--", "sh", "-c", "echo ready; sleep 60; echo done")
		awaitLine(t, cmd, stdout, "ready")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(stdout)
		code := exitCode(t, cmd)
		if strings.Contains(string(rest), "done") {
			t.Errorf("%v: the command went on after the signal: %q", sig, rest)
		}
		if code != 128+int(sig) {
			t.Errorf("%v: exit code %d, want %d (stderr %q)", sig, code, 128+int(sig), stderr)
		}
	}
}

func TestWorkdirIsItsOwnError(t *testing.T) {
	tent(t, "run", "--workdir", "/nonexistent-dir", "--", "ls").expect(t, 125, "--workdir /nonexistent-dir: no such directory")
	tent(t, "run", "--workdir", "/etc/hostname", "--", "ls").expect(t, 125, "--workdir /etc/hostname: not a directory")
	tent(t, "run", "--nofile", "64", "--", "/nonexistent").expect(t, 127, "command not found")
	l := newLife(t)
	id := l.create(t)
	l.tent(t, "exec", "-w", "/nonexistent-dir", id, "--", "ls").expect(t, 125, "--workdir /nonexistent-dir: no such directory")
	r := l.tent(t, "exec", "-w", "/tmp", "-e", "A=b", id, "--", "sh", "-c", `echo "$A $(pwd)"`)
	r.expect(t, 0)
	if r.stdout != "b /tmp\n" {
		t.Errorf("exec -w /tmp -e A=b: %q", r.stdout)
	}
}

func TestExecInteractiveCtrlCKeepsTheShell(t *testing.T) {
	l := newLife(t)
	id := l.create(t)
	term := newTerminal(t, 24, 80)
	before := term.termios(t)
	cmd := term.start(t, "--state-dir", l.dir, "exec", "-it", id, "--", "sh", "-i")
	term.typ(t, "echo up\n")
	select {
	case line := <-term.lines:
		if strings.Contains(line, "cannot run a command on a terminal") {
			t.Skip("this tree's supervisor has no exec sessions yet (see supervisor_tty_linux.go's hook)")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nothing on the terminal in 60s")
	}
	term.await(t, "up")
	term.typ(t, "sh -c 'echo go; exec sleep 60'\n")
	term.await(t, "go")
	term.typ(t, "\x03")
	term.typ(t, "echo after-$?\n")
	term.await(t, "after-130")
	term.typ(t, "exit 6\n")
	if code := exitCode(t, cmd); code != 6 {
		t.Errorf("tent exec exited %d, want the shell's 6", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal was not restored")
	}
}

// startPiped starts tent with its stdout on a pipe the test reads as
// it comes.
func startPiped(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(tentBin, args...)
	cmd.Env = baseEnv()
	cmd.Dir = t.TempDir()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(out), &stderr
}

// awaitLine reads lines until want (a hang guard only: tent is killed
// after 60s).
func awaitLine(t *testing.T, cmd *exec.Cmd, r *bufio.Reader, want string) {
	t.Helper()
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	for {
		l, err := r.ReadString('\n')
		if strings.TrimSpace(l) == want {
			return
		}
		if err != nil {
			t.Fatalf("no line %q: %v", want, err)
		}
	}
}

// A resize that comes before tent catches SIGWINCH (tent attach, exec
// -t and run -t catch their signals in a goroutine, so as not to wait
// for it) is not lost: once they are caught, the terminal's size is sent
// once more. CI's unprivileged run under load once lost one in
// TestCLIAttachTerminal.
func TestSizeSentOnceSignalsAreCaught(t *testing.T) {
	term := newTerminal(t, 30, 100)
	f := &signalForwarder{sigs: make(chan os.Signal, 16), done: make(chan struct{}), caught: make(chan struct{})}
	resize := make(chan sandbox.WindowSize, 4)
	f.start(&callerTerm{sizeFD: int(term.peer.Fd()), rawFD: -1}, resize, func(os.Signal) {})
	defer f.stop()
	// The caller resizes; its SIGWINCH, not caught yet, would be lost.
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 121}); err != nil {
		t.Fatal(err)
	}
	close(f.caught)
	select {
	case sz := <-resize:
		if sz != (sandbox.WindowSize{Rows: 41, Cols: 121}) {
			t.Errorf("the size sent: %+v, want 41x121", sz)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no size sent once the signals were caught: the resize before was lost")
	}
}
