package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// --idle-after: an idle sandbox's supervisor and init give way to their
// idle holders, and every verb brings them back: tent ls still sees the
// sandbox running, exec runs, tent net changes the proxy's rules (the
// proxy is rebuilt on the same listeners), and SIGTERM to the idle
// supervisor ends the sandbox cleanly.
func TestIdleAfter(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	for _, bad := range []string{"0", "-1s", "soon"} {
		l.tent(t, "create", "--idle-after", bad).expect(t, 125, "--idle-after")
	}
	id := l.create(t, "--idle-after", "200ms", "--allow-host", "evil.example")
	sup, initPID := supervisorAndInit(t, l, id)
	held := func(what string) {
		t.Helper()
		if !poll(5*time.Second, func() bool { return argv0(sup) == "tent-idle-supervisor" && argv0(initPID) == "tent-idle" }) {
			t.Fatalf("%s: no idle holders: the supervisor is %q, the init %q", what, argv0(sup), argv0(initPID))
		}
	}
	held("after create")
	if out := l.tent(t, "ls").stdout; !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Fatalf("ls of an idle sandbox: %q", out)
	}
	if r := l.tent(t, "exec", id, "--", "echo", "back"); r.code != 0 || r.stdout != "back\n" {
		t.Fatalf("exec after idling: %d %q %q", r.code, r.stdout, r.stderr)
	}
	held("after exec")
	l.tent(t, "net", id, "--allow-host", "example.org").expect(t, 0)
	held("after net")
	r := l.tent(t, "exec", id, "--", "perl", "-e", proxyGet)
	r.expect(t, 0, "tent: blocked 1 connection: evil.example:80 (not allowed)")
	if !strings.HasPrefix(r.stdout, "HTTP/1.1 403") {
		t.Errorf("after tent net and idling: %q, want 403", r.stdout)
	}
	held("after the proxied exec")
	rec := l.records(t)[id]
	if err := syscall.Kill(sup, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !poll(5*time.Second, func() bool { return !alive(sup) && !alive(initPID) }) {
		t.Fatalf("SIGTERM to the idle supervisor: supervisor %q, init %q", argv0(sup), argv0(initPID))
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		supLog, _ := os.ReadFile(filepath.Join(l.dir, id+".log"))
		t.Errorf("state left after SIGTERM: %v; the supervisor's log:\n%s", ents, supLog)
	}
	for _, c := range rec.Cgroups { // removed by the resumed supervisor
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after SIGTERM: %v", c, err)
		}
	}
}

// A SIGTERM that reaches the supervisor just as it execs its idle holder
// (strace injects it when the exec starts) still ends the sandbox
// cleanly: it stays pending across the exec for the holder, which wakes
// the Go supervisor to end the sandbox and remove its state. Once, such a
// signal killed the starting holder and left the state behind.
func TestIdleHandOffSignal(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (scripts/setup installs it)")
	}
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--idle-after", "1s")
	sup, initPID := supervisorAndInit(t, l, id)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// strace follows the supervisor until it exits.
	out, err := exec.CommandContext(ctx, strace, "-f", "-p", strconv.Itoa(sup), "-o", "/dev/null",
		"-e", "trace=execve", "-e", "inject=execve:signal=TERM:when=1").CombinedOutput()
	if err != nil {
		t.Fatalf("strace: %v\n%s", err, out)
	}
	if !poll(5*time.Second, func() bool { return !alive(sup) && !alive(initPID) }) {
		t.Fatalf("after SIGTERM at the hand-off: supervisor %q, init %q", argv0(sup), argv0(initPID))
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state left after SIGTERM at the hand-off: %v", ents)
	}
}

// While the supervisor execs its idle holder (from a thread other than
// its first: it reads as a zombie with an empty command line meanwhile)
// the sandbox stays running to every reader of its record. Once, tent ls
// read it as stopped then, and tent rm would have reclaimed it.
func TestIdleHandOffStaysRunning(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	b, err := supervised.Open(l.dir, supervised.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		id := l.create(t, "--idle-after", "100ms")
		// Only the supervisor matters here: with 100ms to idle, its init
		// may already be handing off to the idle holder.
		sup := l.records(t)[id].Supervisor
		if sup == 0 {
			t.Fatalf("round %d: sandbox %s has no supervisor in its record", round, id)
		}
		reads := 0
		for deadline := time.Now().Add(5 * time.Second); argv0(sup) != "tent-idle-supervisor"; reads++ {
			if time.Now().After(deadline) {
				t.Fatalf("no idle holder for the supervisor: %q", argv0(sup))
			}
			recs, err := b.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].State != "running" {
				var states []string
				for _, r := range recs {
					states = append(states, r.ID+" "+string(r.State))
				}
				t.Fatalf("round %d, read %d, supervisor %q: the records read %q", round, reads, argv0(sup), states)
			}
		}
		l.tent(t, "rm", id).expect(t, 0)
	}
}

// kill -9 of an idle supervisor (its holder) takes the sandbox with it;
// tent ls sees it stopped, exec refuses it and tent rm cleans up.
func TestIdleSupervisorKilled(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--idle-after", "200ms")
	sup, initPID := supervisorAndInit(t, l, id)
	if !poll(5*time.Second, func() bool { return argv0(sup) == "tent-idle-supervisor" && argv0(initPID) == "tent-idle" }) {
		t.Fatalf("no idle holders: the supervisor is %q, the init %q", argv0(sup), argv0(initPID))
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !poll(5*time.Second, func() bool { return !alive(initPID) }) {
		t.Fatalf("the init outlived its supervisor: %q", argv0(initPID))
	}
	l.expectReconciled(t, id)
}

// An idle suspended sandbox stays suspended through its supervisor's
// hand-off and resumes; an idle sandbox's --timeout still ends it (the
// holder wakes at the deadline).
//
// Nothing here races the timeout: under slow emulation the timed sandbox
// may end before the test first looks at it (once, the suspend steps took
// longer than its 1.5 s and the test failed). Its processes are read
// if they are still there, and the test then only waits for the end.
func TestIdleSuspendedAndTimedOut(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--idle-after", "200ms")
	sup, _ := supervisorAndInit(t, l, id)
	if r := l.tent(t, "suspend", id); r.code == 0 {
		if !poll(5*time.Second, func() bool { return argv0(sup) == "tent-idle-supervisor" }) {
			t.Fatalf("no idle holder for a suspended sandbox's supervisor: %q", argv0(sup))
		}
		if out := l.tent(t, "ls").stdout; !strings.Contains(out, "suspended") {
			t.Errorf("ls of an idle suspended sandbox: %q", out)
		}
		l.tent(t, "exec", id, "--", "true").expect(t, 125, "suspended")
		l.tent(t, "resume", id).expect(t, 0)
		l.tent(t, "exec", id, "--", "true").expect(t, 0)
	} else {
		r.expect(t, 125, "cgroup") // no cgroup: an unprivileged user without delegation
	}
	timed := l.create(t, "--idle-after", "200ms", "--timeout", "1500ms")
	// Whatever of it still runs now (0: already gone).
	tsup := l.records(t)[timed].Supervisor
	var tinit int
	if tsup != 0 {
		tinit = initOf(tsup)
	}
	// The check may start just as the timed sandbox hands off to its idle
	// holders: a Go process exec'ing from a thread other than its first
	// shows as a zombie with an empty command line meanwhile, so only the
	// record's end with it (removed, or kept as stopped) means the
	// sandbox ended.
	ended := func() bool {
		rec, ok := l.records(t)[timed]
		return (!ok || rec.State == "stopped") && (tsup == 0 || !alive(tsup)) && (tinit == 0 || !alive(tinit)) &&
			len(procs(func(c string) bool { return strings.Contains(c, timed) })) == 0
	}
	if !poll(60*time.Second, ended) {
		t.Fatalf("--timeout of an idle sandbox: supervisor %d %q, init %d %q, records %v", tsup, argv0(tsup), tinit, argv0(tinit), l.records(t))
	}
}
