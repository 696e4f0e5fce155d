package cli

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// terminal is a pty pair standing for the user's terminal: tent runs on
// the peer as its controlling terminal, the test types into the master
// and reads the screen from it.
type terminal struct {
	master, peer *os.File
	lines        chan string
}

func newTerminal(t *testing.T, rows, cols uint16) *terminal {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(m.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	term := &terminal{master: m, peer: p, lines: make(chan string, 256)}
	go func() {
		sc := bufio.NewScanner(m)
		for sc.Scan() {
			term.lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(term.lines)
	}()
	t.Cleanup(func() { m.Close(); p.Close() })
	return term
}

// termios is the user's terminal settings, to compare before and after.
func (term *terminal) termios(t *testing.T) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(term.peer.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// start starts tent on the terminal, as a shell would: a session of its
// own with the terminal as its controlling terminal.
func (term *terminal) start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(tentBin, args...)
	cmd.Env = baseEnv()
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term.peer, term.peer, term.peer
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func (term *terminal) typ(t *testing.T, s string) {
	t.Helper()
	if _, err := term.master.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// await waits for a screen line equal to want, a shell prompt aside (a
// hang guard only).
func (term *terminal) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-term.lines:
			if !ok {
				t.Fatalf("the terminal closed before %q; it showed %q", want, seen)
			}
			seen = append(seen, l)
			for strings.HasPrefix(l, "$ ") || strings.HasPrefix(l, "# ") {
				l = l[2:]
			}
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("no line %q on the terminal in 60s; it showed %q", want, seen)
		}
	}
}

// exitCode waits for tent (a hang guard only) and returns its status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("tent did not exit in 60s")
	}
	return -1
}

func TestRunInteractiveTerminal(t *testing.T) {
	term := newTerminal(t, 30, 100)
	before := term.termios(t)
	cmd := term.start(t, "run", "-it", "--", "sh", "-i")
	term.typ(t, "tty; stty size\n")
	term.await(t, "/dev/pts/0")
	term.await(t, "30 100")
	// A resize of the user's terminal (the kernel sends tent SIGWINCH)
	// reaches the terminal inside.
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 121}); err != nil {
		t.Fatal(err)
	}
	term.typ(t, "while [ \"$(stty size)\" != '41 121' ]; do sleep 0.05; done; echo resized\n")
	term.await(t, "resized")
	// Ctrl-C interrupts the foreground job only; the shell goes on.
	term.typ(t, "sh -c 'echo go; exec sleep 60'\n")
	term.await(t, "go")
	term.typ(t, "\x03")
	term.typ(t, "echo after-$?\n")
	term.await(t, "after-130")
	term.typ(t, "exit 3\n")
	if code := exitCode(t, cmd); code != 3 {
		t.Errorf("tent exited %d, want the shell's 3", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestRunTerminalRestoredAfterTheSandboxIsKilled(t *testing.T) {
	term := newTerminal(t, 24, 80)
	before := term.termios(t)
	cmd := term.start(t, "run", "-it", "--", "sh", "-i")
	term.typ(t, "echo up\n")
	term.await(t, "up")
	// SIGKILL the sandbox's init (tent's child, cloned by any of its
	// threads).
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/*/children")
	var kids []string
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) == 0 {
		t.Fatal("found no sandbox init under tent")
	}
	for _, k := range kids {
		pid, _ := strconv.Atoi(k)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if code := exitCode(t, cmd); code != 125 {
		t.Errorf("tent exited %d, want 125", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestRunWithoutTTYIsUnchanged(t *testing.T) {
	// Without -t the command gets tent's own stdio: here the caller's
	// terminal, which stays in its mode, and no terminal of its own.
	term := newTerminal(t, 24, 80)
	before := term.termios(t)
	cmd := term.start(t, "run", "--", "sh", "-c", "test -t 0 && test -t 1 && echo stdin-tty; exit 4")
	term.await(t, "stdin-tty")
	if code := exitCode(t, cmd); code != 4 {
		t.Errorf("tent exited %d, want 4", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal changed without -t")
	}
}
