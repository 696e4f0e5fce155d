package cli

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	// The init may be between two programs (an idle hand-off execs its
	// holder): its command line is empty for that moment.
	init := 0
	poll(5*time.Second, func() bool { init = initOf(sup); return sup == 0 || init != 0 })
	if sup == 0 || init == 0 {
		t.Fatalf("sandbox %s: supervisor %d, init %d", id, sup, init)
	}
	return sup, init
}
