package main

import (
	"context"
	"encoding/json"
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

// life runs tent with a private state directory.
type life struct{ dir string }

func newLife(t *testing.T) life {
	l := life{dir: t.TempDir()}
	t.Cleanup(func() { tent(t, "--state-dir", l.dir, "rm", "--all") })
	return l
}

func (l life) tent(t *testing.T, args ...string) result {
	t.Helper()
	return tent(t, append([]string{"--state-dir", l.dir}, args...)...)
}

func (l life) create(t *testing.T, args ...string) string {
	t.Helper()
	r := l.tent(t, append([]string{"create"}, args...)...)
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	return lines[len(lines)-1]
}

func TestLifecycleVerbs(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--name", "box", "--label", "team=a", "--hostname", "kept")
	if len(id) != 16 {
		t.Fatalf("create printed %q, want a 16-digit id", id)
	}
	l.tent(t, "exec", "box", "--", "sh", "-c", "echo state > /tmp/f").expect(t, 0)
	if r := l.tent(t, "exec", id[:6], "--", "sh", "-c", "cat /tmp/f; hostname"); r.stdout != "state\nkept\n" {
		t.Errorf("second exec saw %q: state or settings lost", r.stdout)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "exit 9").expect(t, 9)
	l.tent(t, "exec", "--env", "A=b", "--workdir", "/tmp", id, "--", "sh", "-c", `test "$A$(pwd)" = b/tmp`).expect(t, 0)
	l.tent(t, "exec", "--timeout", "200ms", id, "--", "sleep", "10").expect(t, 124, "timed out")
	l.tent(t, "exec", id, "--", "/nonexistent").expect(t, 127)

	if r := l.tent(t, "ls", "-q"); strings.TrimSpace(r.stdout) != id {
		t.Errorf("ls -q: %q", r.stdout)
	}
	var recs []map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "ls", "-o", "json").stdout), &recs); err != nil || len(recs) != 1 || recs[0]["state"] != "running" || recs[0]["name"] != "box" {
		t.Errorf("ls -o json: %v %v", recs, err)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", "box").stdout), &rec); err != nil || rec["id"] != id {
		t.Errorf("inspect: %v %v", rec, err)
	}
	pid := int(rec["supervisor_pid"].(float64))
	l.tent(t, "rm", id).expect(t, 0)
	// Exited (a zombie awaiting its reaper has no command line).
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); strings.Contains(string(b), id) {
		t.Errorf("supervisor %d still runs after rm", pid)
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state left after rm: %v", ents)
	}
	l.tent(t, "exec", id, "--", "true").expect(t, 125, "no such sandbox")
}

func TestExecMaxOutput(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "exec", "--max-output", "5", id, "--", "sh", "-c", "echo hello world; echo oops >&2; exit 3")
	if r.code != 3 || r.stdout != "hello" || r.stderr != "oops\ntent: stdout truncated at --max-output 5: the rest was dropped\n" {
		t.Errorf("capped at 5 bytes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The command is never blocked: 64 MiB into a 1K cap, then it goes on.
	r = l.tent(t, "exec", "--max-output", "1K", id, "--", "sh", "-c", "head -c 67108864 /dev/zero; echo done >&2")
	if r.code != 0 || len(r.stdout) != 1024 || r.stderr != "done\ntent: stdout truncated at --max-output 1K: the rest was dropped\n" {
		t.Errorf("64 MiB capped at 1K: exit %d, %d bytes, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	// Without the flag tent exec streams everything.
	if r = l.tent(t, "exec", id, "--", "head", "-c", "3000000", "/dev/zero"); r.code != 0 || len(r.stdout) != 3000000 || r.stderr != "" {
		t.Errorf("uncapped: exit %d, %d bytes, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	l.tent(t, "exec", "--max-output", "0", id, "--", "true").expect(t, 125, `tent: --max-output "0": want a positive size`)
	l.tent(t, "exec", "--max-output", "-1", id, "--", "true").expect(t, 125, `tent: --max-output "-1": size is negative`)
}

func TestLifecycleRefusals(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	l.tent(t, "exec", "nope", "--", "true").expect(t, 125, "no such sandbox")
	l.tent(t, "create", "--memory", "-1").expect(t, 125, "memory")
	// Refused by the supervisor itself (a mount source that vanished is
	// caught before; a bad seccomp file after the flags parse).
	l.tent(t, "create", "--rw", "/nonexistent-tent-dir:/x").expect(t, 125, "nonexistent")
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("a refused create left state: %v", ents)
	}
	a, b := l.create(t), l.create(t)
	common := 0
	for common < len(a) && a[common] == b[common] {
		common++
	}
	l.tent(t, "exec", a[:common], "--", "true").expect(t, 125) // "" or a shared prefix: ambiguous or unknown
	l.tent(t, "net", a, "--allow-host", "*").expect(t, 125, `"*"`)
	l.tent(t, "net", a, "--allow-host", "example.com").expect(t, 125, "limited") // a none sandbox has no proxy
	l.tent(t, "rm", "--all").expect(t, 0)
}

func TestLimitedSandboxRulesChangeAtRuntime(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--allow-host", "evil.example")
	get := func() string { return l.tent(t, "exec", id, "--", "perl", "-e", proxyGet).stdout }
	if got := get(); strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("allowed host refused: %q", got)
	}
	l.tent(t, "net", id, "--allow-host", "example.org").expect(t, 0)
	r := l.tent(t, "exec", id, "--", "perl", "-e", proxyGet)
	r.expect(t, 0, "tent: blocked 1 connection: evil.example:80 (not allowed)")
	if !strings.HasPrefix(r.stdout, "HTTP/1.1 403") {
		t.Errorf("after tent net: %q, want 403", r.stdout)
	}
	l.tent(t, "net", id, "--net", "host").expect(t, 125, "host")
}

func TestKilledSupervisorIsReconciled(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	sup, _ := supervisorAndInit(t, l, id)
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.expectReconciled(t, id)
}

// expectReconciled checks a sandbox whose supervisor was killed: tent ls
// shows it stopped (within 2 s), exec refuses it, and rm leaves no state.
func (l life) expectReconciled(t *testing.T, id string) {
	t.Helper()
	stopped := func() bool {
		out := l.tent(t, "ls").stdout
		return strings.Contains(out, id) && strings.Contains(out, "stopped")
	}
	if !poll(2*time.Second, stopped) {
		t.Fatalf("ls after kill -9 of the supervisor: %q", l.tent(t, "ls").stdout)
	}
	l.tent(t, "exec", id, "--", "true").expect(t, 125, "stopped")
	l.tent(t, "rm", id).expect(t, 0)
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state left after rm: %v", ents)
	}
}

func TestSuspendAndResumeVerbs(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	r := l.tent(t, "suspend", id)
	if r.code != 0 {
		// Without a cgroup (an unprivileged user without delegation).
		r.expect(t, 125, "cgroup")
		return
	}
	if out := l.tent(t, "ls").stdout; !strings.Contains(out, "suspended") {
		t.Errorf("ls after suspend: %q", out)
	}
	l.tent(t, "exec", id, "--", "true").expect(t, 125, "suspended")
	l.tent(t, "resume", id).expect(t, 0)
	l.tent(t, "exec", id, "--", "true").expect(t, 0)
	l.tent(t, "suspend", id).expect(t, 0)
	l.tent(t, "rm", id).expect(t, 0) // a suspended sandbox is removed too
}

func TestCp(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	host := t.TempDir()
	os.Chmod(host, 0o777)
	id := l.create(t)
	src := filepath.Join(host, "in.txt")
	if err := os.WriteFile(src, []byte("to the sandbox\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "cp", src, id+":/tmp/in.txt").expect(t, 0)
	if r := l.tent(t, "exec", id, "--", "sh", "-c", "cat /tmp/in.txt; stat -c %a /tmp/in.txt"); r.stdout != "to the sandbox\n640\n" {
		t.Errorf("inside after cp in: %q", r.stdout)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "echo from the sandbox > /tmp/out.txt").expect(t, 0)
	dst := filepath.Join(host, "out.txt")
	l.tent(t, "cp", id+":/tmp/out.txt", dst).expect(t, 0)
	if b, _ := os.ReadFile(dst); string(b) != "from the sandbox\n" {
		t.Errorf("host after cp out: %q", b)
	}
	if r := l.tent(t, "cp", id+":/tmp/out.txt", "-"); r.stdout != "from the sandbox\n" {
		t.Errorf("cp to stdout: %q", r.stdout)
	}
	l.tent(t, "cp", id+":/etc/shadow", "-").expect(t, 125, "tent: read /etc/shadow: permission denied")
	l.tent(t, "cp", id+":/nope", dst).expect(t, 125, "tent: stat /nope: no such file or directory")
	l.tent(t, "cp", src, src).expect(t, 125, "ID:PATH")
}

func TestDiffAndExportVerbs(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755) // reachable by a root caller's sandbox user
	for p, c := range map[string]string{"a.txt": "alpha\n", "b.txt": "beta\n"} {
		os.WriteFile(filepath.Join(src, p), []byte(c), 0o666)
		os.Chmod(filepath.Join(src, p), 0o666)
	}
	r0 := l.tent(t, "create", "--cow", src+":/work")
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	l.tent(t, "exec", id, "--", "sh", "-c", "cd /work && echo ALPHA > a.txt && rm b.txt && echo new > c.txt").expect(t, 0)
	if b, _ := os.ReadFile(filepath.Join(src, "a.txt")); string(b) != "alpha\n" {
		t.Fatalf("the host directory changed: %q", b)
	}
	if r := l.tent(t, "diff", id); r.stdout != "M /work/a.txt\nD /work/b.txt\nA /work/c.txt\n" {
		t.Errorf("tent diff: %q", r.stdout)
	}
	r := l.tent(t, "export", id, "--patch")
	r.expect(t, 0)
	copyDir := t.TempDir()
	for _, p := range []string{"a.txt", "b.txt"} {
		b, _ := os.ReadFile(filepath.Join(src, p))
		os.WriteFile(filepath.Join(copyDir, p), b, 0o644)
	}
	patch := exec.Command("patch", "-p1", "--batch", "--remove-empty-files")
	patch.Dir, patch.Stdin = copyDir, strings.NewReader(r.stdout)
	if out, err := patch.CombinedOutput(); err != nil {
		t.Fatalf("patch -p1 of tent export --patch: %v\n%s\n%s", err, out, r.stdout)
	}
	if got := tree(t, copyDir); len(got) != 2 || got["a.txt"] != "ALPHA\n" || got["c.txt"] != "new\n" {
		t.Errorf("patched copy: %v", got)
	}
	toDir := t.TempDir()
	l.tent(t, "export", id, "--to", toDir).expect(t, 0)
	if got := tree(t, toDir); got["a.txt"] != "ALPHA\n" || got["c.txt"] != "new\n" {
		t.Errorf("export --to: %v", got)
	}
	l.tent(t, "export", id).expect(t, 125, "--patch")
	other := l.create(t)
	l.tent(t, "diff", other).expect(t, 125, "no cow mount")
}

func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(root, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

func TestSnapshotForkAndResumeVerbs(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--name", "orig")
	l.tent(t, "exec", id, "--", "sh", "-c", "echo saved > /tmp/state").expect(t, 0)
	r := l.tent(t, "snapshot", id)
	if r.code != 0 {
		t.Fatalf("tent snapshot: exit %d: %s", r.code, r.stderr)
	}
	snap := strings.TrimSpace(r.stdout)
	if ls := l.tent(t, "snapshot", "ls").stdout; !strings.Contains(ls, snap) || !strings.Contains(ls, id) {
		t.Errorf("snapshot ls: %q", ls)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "echo changed > /tmp/state").expect(t, 0)

	fr := l.tent(t, "fork", snap[:6], "--name", "copy")
	fr.expect(t, 0)
	forkID := strings.TrimSpace(fr.stdout)
	if r := l.tent(t, "exec", "copy", "--", "cat", "/tmp/state"); r.stdout != "saved\n" {
		t.Errorf("the fork sees %q", r.stdout)
	}

	// The original's supervisor dies (a host restart, a kill -9): resume
	// brings it back from its latest snapshot, under the same id.
	var rec struct {
		Supervisor int `json:"supervisor_pid"`
	}
	json.Unmarshal([]byte(l.tent(t, "inspect", id).stdout), &rec)
	syscall.Kill(rec.Supervisor, syscall.SIGKILL)
	// Wait for the event, however long a slow machine takes (wait's
	// 60 s guard bounds a hang); a short deadline raced it.
	poll(60*time.Second, func() bool { return l.lsStates(t)[id] == "stopped" })
	l.tent(t, "resume", id).expect(t, 0)
	if r := l.tent(t, "exec", id, "--", "cat", "/tmp/state"); r.stdout != "saved\n" {
		t.Errorf("resumed sandbox sees %q", r.stdout)
	}
	l.tent(t, "rm", id, forkID).expect(t, 0)
	l.tent(t, "snapshot", "rm", snap).expect(t, 0)
	if ls := l.tent(t, "snapshot", "ls").stdout; strings.Contains(ls, snap) {
		t.Errorf("snapshot rm left %q", ls)
	}
	l.tent(t, "fork", "nope").expect(t, 125, "no snapshot")
}

// argv0 is argv[0] of process pid ("" once it is gone).
func argv0(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	a, _, _ := strings.Cut(string(b), "\x00")
	return a
}

// supervisorAndInit returns the pids of sandbox id's supervisor and init.
func supervisorAndInit(t *testing.T, l life, id string) (int, int) {
	t.Helper()
	sup := l.records(t)[id].Supervisor
	init := initOf(sup)
	if sup == 0 || init == 0 {
		t.Fatalf("sandbox %s: supervisor %d, init %d", id, sup, init)
	}
	return sup, init
}

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
		sup, _ := supervisorAndInit(t, l, id)
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
