package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tent exec -d starts a command the sandbox owns: tent exec exits with
// its pid, the command runs on, tent ps lists it from another process,
// tent attach follows it to its exit status, tent kill signals one.
func TestCLIDetachedCommands(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "exec", "-d", id, "--", "sh", "-c", "echo started; until [ -e /tmp/go ]; do sleep 0.05; done; echo done; exit 3")
	r.expect(t, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil || pid <= 1 {
		t.Fatalf("tent exec -d printed %q", r.stdout)
	}
	ps := l.tent(t, "ps", id)
	ps.expect(t, 0)
	if lines := strings.Split(strings.TrimSpace(ps.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "PID") ||
		strings.Fields(lines[1])[0] != strconv.Itoa(pid) || strings.Fields(lines[1])[1] != "running" || !strings.Contains(lines[1], "sh -c") {
		t.Errorf("tent ps:\n%s", ps.stdout)
	}
	// A running command has no exit status: none in JSON either.
	var running []map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &running); err != nil || len(running) != 1 || running[0]["running"] != true {
		t.Errorf("tent ps -o json of a running command: %v, %v", running, err)
	} else if exit, ok := running[0]["exit"]; ok {
		t.Errorf("tent ps -o json of a running command has \"exit\": %v", exit)
	}
	l.tent(t, "exec", id, "--", "touch", "/tmp/go").expect(t, 0)
	a := l.tent(t, "attach", id, strconv.Itoa(pid))
	if a.code != 3 || a.stdout != "started\ndone\n" {
		t.Errorf("tent attach: exit %d, stdout %q, stderr %q; want 3 and the whole output", a.code, a.stdout, a.stderr)
	}
	var procs []struct {
		Pid     int
		Running bool
		Exit    int
		Signal  string
	}
	if err := json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &procs); err != nil || len(procs) != 1 || procs[0].Running || procs[0].Exit != 3 {
		t.Errorf("tent ps -o json after the exit: %+v, %v", procs, err)
	}

	r = l.tent(t, "exec", "-d", id, "--", "sleep", "60")
	sleeper := strings.TrimSpace(r.stdout)
	l.tent(t, "kill", id, sleeper, "KILL").expect(t, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &procs)
		if len(procs) == 2 && !procs[1].Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed command still runs: %+v", procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if procs[1].Signal != "killed" || procs[1].Exit != 137 {
		t.Errorf("after tent kill KILL: %+v", procs[1])
	}
	l.tent(t, "kill", id, sleeper).expect(t, 125, "already exited")
	l.tent(t, "kill", id, sleeper, "BOGUS").expect(t, 125, "signal \"BOGUS\"")
	l.tent(t, "attach", id, "99999").expect(t, 125, "no detached command with pid 99999")
	l.tent(t, "exec", "-d", "--max-output", "1K", id, "--", "true").expect(t, 125, "--max-output does not apply")
}

// tent attach writes its stdin to a command started with tent exec -d -i
// (E2B's sendStdin): from another process than the one that started it,
// and the end of its stdin is the command's.
func TestCLIAttachWritesStdin(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "exec", "-d", "-i", id, "--", "sh", "-c", "read l; echo got $l; cat; echo eof")
	r.expect(t, 0)
	pid := strings.TrimSpace(r.stdout)
	var procs []struct {
		Pid   int
		Stdin bool
	}
	if err := json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &procs); err != nil || len(procs) != 1 || !procs[0].Stdin {
		t.Errorf("tent ps -o json of a command with stdin: %+v, %v", procs, err)
	}
	a := invocation{args: []string{"--state-dir", l.dir, "attach", id, pid}, stdin: strings.NewReader("hello\nmore\n")}.run(t)
	if a.code != 0 || a.stdout != "got hello\nmore\neof\n" {
		t.Errorf("tent attach with stdin: exit %d, stdout %q, stderr %q; want the command's echo of it", a.code, a.stdout, a.stderr)
	}
	// Without -i a command has no stdin to write: tent attach reads none.
	r = l.tent(t, "exec", "-d", id, "--", "sh", "-c", "cat; echo eof")
	a = invocation{args: []string{"--state-dir", l.dir, "attach", id, strings.TrimSpace(r.stdout)}, stdin: strings.NewReader("ignored\n")}.run(t)
	if a.code != 0 || a.stdout != "eof\n" {
		t.Errorf("tent attach of a command without stdin: exit %d, stdout %q, stderr %q", a.code, a.stdout, a.stderr)
	}
}

// tent exec -d -it runs the command on a terminal inside, the sandbox's:
// tent attach connects the caller's terminal to it (sized as the
// caller's, resized with it, its mode restored after); Ctrl-P Ctrl-Q
// detaches and leaves the command running, and a later tent attach, on
// another terminal, finds it where it was and ends with its status.
func TestCLIAttachTerminal(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "exec", "-d", "-it", id, "--", "sh", "-i")
	r.expect(t, 0)
	pid := strings.TrimSpace(r.stdout)
	term := newTerminal(t, 30, 100)
	before := term.termios(t)
	cmd := term.start(t, "--state-dir", l.dir, "attach", id, pid)
	term.typ(t, "test -t 0 && stty size\n")
	term.await(t, "30 100")
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 121}); err != nil {
		t.Fatal(err)
	}
	term.typ(t, "while [ \"$(stty size)\" != '41 121' ]; do sleep 0.05; done; echo resized\n")
	term.await(t, "resized")
	term.typ(t, "\x10\x11") // Ctrl-P Ctrl-Q
	if code := exitCode(t, cmd); code != 0 {
		t.Errorf("tent attach detached with %d, want 0", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", before, after)
	}
	var procs []struct {
		Pid     int
		Running bool
		TTY     bool
	}
	if err := json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &procs); err != nil || len(procs) != 1 || !procs[0].Running || !procs[0].TTY {
		t.Errorf("tent ps -o json once detached: %+v, %v; want it running on its terminal", procs, err)
	}
	again := newTerminal(t, 24, 80)
	cmd = again.start(t, "--state-dir", l.dir, "attach", id, pid)
	again.typ(t, "echo again-$(stty size | tr ' ' x)\n")
	again.await(t, "again-24x80")
	again.typ(t, "exit 3\n")
	if code := exitCode(t, cmd); code != 3 {
		t.Errorf("tent attach exited %d, want the shell's 3", code)
	}
}

// A command on a terminal that takes no input (tent exec -d -t, without
// -i) ignores the caller's keys, but Ctrl-P Ctrl-Q still detaches tent
// attach, and the caller's terminal is restored: a shell that ignores
// SIGINT and SIGQUIT would otherwise leave no way out.
func TestCLIAttachTerminalWithoutStdinDetaches(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "exec", "-d", "-t", id, "--", "sh", "-c", "echo ready; read line; echo got-$line; sleep 300")
	r.expect(t, 0)
	pid := strings.TrimSpace(r.stdout)
	term := newTerminal(t, 24, 80)
	before := term.termios(t)
	cmd := term.start(t, "--state-dir", l.dir, "attach", id, pid)
	term.await(t, "ready")
	term.typ(t, "typed\n\x10\x11") // not the command's; then Ctrl-P Ctrl-Q
	if code := exitCode(t, cmd); code != 0 {
		t.Errorf("tent attach detached with %d, want 0", code)
	}
	if after := term.termios(t); after != before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", before, after)
	}
	var procs []struct {
		Pid     int
		Running bool
	}
	if err := json.Unmarshal([]byte(l.tent(t, "ps", "-o", "json", id).stdout), &procs); err != nil || len(procs) != 1 || !procs[0].Running {
		t.Errorf("tent ps -o json once detached: %+v, %v; want it running", procs, err)
	}
	// Had the keys reached it, its read would have ended and its sleep
	// begun (the check cannot fail falsely: without input, it never does).
	if out := l.tent(t, "exec", id, "--", "sh", "-c", "ps -eo args | grep -c '^sleep 300' || true").stdout; strings.TrimSpace(out) != "0" {
		t.Errorf("the command read the caller's keys: it went on to its sleep (%q)", out)
	}
}
