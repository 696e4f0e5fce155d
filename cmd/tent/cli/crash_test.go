package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Crash tests: a supervisor or a tent create killed with SIGKILL at the
// worst moment leaves state that the CLI reads consistently and that
// tent rm cleans up completely.

// crashRecord is what the crash tests read of a state record.
type crashRecord struct {
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Supervisor int      `json:"supervisor_pid"`
	Cgroups    []string `json:"cgroups"`
	Layers     []struct {
		Upper string `json:"upper"`
	} `json:"layers"`
}

// records parses every record file in the state directory: none may be
// torn.
func (l life) records(t *testing.T) map[string]crashRecord {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(l.dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]crashRecord{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec crashRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("torn state record %s: %v\n%s", p, err, b)
		}
		out[rec.ID] = rec
	}
	return out
}

// lsStates is tent ls -o json as id -> state.
func (l life) lsStates(t *testing.T) map[string]string {
	t.Helper()
	r := l.tent(t, "ls", "-o", "json")
	r.expect(t, 0)
	var recs []crashRecord
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	out := map[string]string{}
	for _, rec := range recs {
		out[rec.ID] = rec.State
	}
	return out
}

// crashTempDir returns an empty directory for the sandboxes' cow layers
// (tent's TMPDIR), reachable by a root caller's sandbox user.
func crashTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// createCow creates a sandbox with a cow mount, its layers in tmp.
func (l life) createCow(t *testing.T, tmp string) string {
	t.Helper()
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	r := invocation{args: []string{"--state-dir", l.dir, "create", "--cow", src + ":/work"}, env: []string{"TMPDIR=" + tmp}}.run(t)
	if r.code == 125 && strings.Contains(r.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r.stderr)
	}
	r.expect(t, 0)
	return strings.TrimSpace(r.stdout)
}

// procStat returns the state letter and parent pid of pid; ok is false
// once it is gone.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// alive reports whether pid runs: a zombie awaiting its reaper does not,
// once every thread of it has exited. A killed multi-threaded process
// reads as a zombie by its first thread while others are still exiting,
// and tent itself (namespaces.ProcessRuns) takes it for running until
// they are gone too.
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	if !ok {
		return false
	}
	if state != "Z" && state != "X" {
		return true
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/stat")
		if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
				return true
			}
		}
	}
	return false
}

// procs lists the live processes whose command line (NUL-terminated
// arguments) matches.
func procs(match func(cmdline string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if match(string(b)) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// cmdline matches a process that runs exactly argv.
func cmdline(argv ...string) func(string) bool {
	want := strings.Join(argv, "\x00") + "\x00"
	return func(got string) bool { return got == want }
}

// initOf returns the sandbox init (tent-init) the supervisor started, or
// 0.
func initOf(supervisor int) int {
	// The Go init, or the idle holder standing in for it.
	isInit := func(c string) bool { return cmdline("tent-init")(c) || strings.HasPrefix(c, "tent-idle\x00") }
	// Its threads' children (CONFIG_PROC_CHILDREN), else every process.
	kids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", supervisor))
	for _, k := range kids {
		b, _ := os.ReadFile(k)
		for _, f := range strings.Fields(string(b)) {
			c, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if pid, err := strconv.Atoi(f); err == nil && isInit(string(c)) {
				return pid
			}
		}
	}
	for _, pid := range procs(isInit) {
		if _, ppid, _ := procStat(pid); ppid == supervisor {
			return pid
		}
	}
	return 0
}

// poll calls cond until it holds or d passes.
func poll(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// uniqueSleep is an argument of sleep that names this test's process:
// "30.<pid><n>" seconds.
func uniqueSleep(n int) string { return fmt.Sprintf("30.%d%d", os.Getpid(), n) }

// assertCleanedUp checks that nothing of a removed sandbox is left: its
// processes, its cgroups, its cow layers (tmp is empty but for src) and
// its files in the state directory (only an empty snapshots directory
// may stay).
func (l life) assertCleanedUp(t *testing.T, pids []int, cgroups []string, tmp string) {
	t.Helper()
	for _, pid := range pids {
		if !poll(5*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("process %d outlived tent rm", pid)
		}
	}
	for _, c := range cgroups {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after tent rm (%v)", c, err)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 1 || ents[0].Name() != "src" {
		t.Errorf("temporary directory after tent rm: %v, want only src", ents)
	}
	ents, _ := os.ReadDir(l.dir)
	for _, e := range ents {
		if e.Name() == "snapshots" {
			if snaps, _ := os.ReadDir(filepath.Join(l.dir, "snapshots")); len(snaps) == 0 {
				continue
			}
		}
		t.Errorf("state directory after tent rm: %v", ents)
		break
	}
}

func TestCrashSupervisorDuringExec(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	tmp := crashTempDir(t)
	id := l.createCow(t, tmp)
	rec := l.records(t)[id]
	initPID := initOf(rec.Supervisor)
	if initPID == 0 || len(rec.Layers) != 1 {
		t.Fatalf("record %+v: supervisor without an init (%d) or no cow layer", rec, initPID)
	}
	sleep := uniqueSleep(1)
	exec, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "exec", id, "--", "sleep", sleep}}.start(t)
	var sleeping []int
	if !poll(10*time.Second, func() bool { sleeping = procs(cmdline("sleep", sleep)); return len(sleeping) == 1 }) {
		t.Fatalf("the exec's sleep did not start: %v", sleeping)
	}
	if err := syscall.Kill(rec.Supervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := wait(t, exec, stdout, stderr, start)
	// (No bound on the time it took: wait's hang guard catches an exec
	// that never notices, and a slow machine is no failure.)
	r.expect(t, 125, "sandbox "+id+": no answer")
	// The sandbox died with its supervisor: init and command alike.
	for _, pid := range []int{initPID, sleeping[0]} {
		if !poll(5*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("process %d outlived its killed supervisor", pid)
		}
	}
	if got := l.records(t)[id]; got.ID != id {
		t.Fatalf("the record is gone after the crash: %v", l.records(t))
	}
	if st := l.lsStates(t); len(st) != 1 || st[id] != "stopped" {
		t.Errorf("ls -o json after the crash: %v, want %s stopped", st, id)
	}
	l.tent(t, "exec", id, "--", "true").expect(t, 125, "is stopped", "tent rm "+id)
	l.tent(t, "rm", id).expect(t, 0)
	l.assertCleanedUp(t, []int{initPID, sleeping[0]}, rec.Cgroups, tmp)
}

func TestCrashSupervisorDuringSnapshot(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	tmp := crashTempDir(t)
	id := l.createCow(t, tmp)
	rec := l.records(t)[id]
	initPID := initOf(rec.Supervisor)
	// 128 MiB that zstd cannot shrink: the snapshot takes a moment. And a
	// process that outlives its exec, frozen with the rest by the
	// snapshot.
	sleep := uniqueSleep(2)
	l.tent(t, "exec", id, "--", "sh", "-c", "head -c 134217728 /dev/urandom > /work/big && (sleep "+sleep+" >/dev/null 2>&1 &)").expect(t, 0)
	var sleeping []int
	if !poll(10*time.Second, func() bool { sleeping = procs(cmdline("sleep", sleep)); return len(sleeping) == 1 }) {
		t.Fatalf("the background sleep did not start: %v", sleeping)
	}
	snaps := filepath.Join(l.dir, "snapshots")
	partial := func() []string {
		ents, _ := os.ReadDir(snaps)
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	snap, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "snapshot", id}}.start(t)
	if !poll(10*time.Second, func() bool { return len(partial()) > 0 }) {
		t.Fatal("the snapshot's temporary directory never appeared")
	}
	if err := syscall.Kill(rec.Supervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := wait(t, snap, stdout, stderr, start)
	r.expect(t, 125, "sandbox "+id+": no answer")
	if r.stdout != "" {
		t.Errorf("the killed snapshot printed an id: %q", r.stdout)
	}
	// Killed in the middle: the partial snapshot is on disk, never listed.
	if p := partial(); len(p) != 1 || !strings.HasPrefix(p[0], ".tmp-"+id+"-") {
		t.Errorf("partial snapshots after the kill: %v, want one named after %s", p, id)
	}
	if ls := l.tent(t, "snapshot", "ls"); ls.stdout != "SNAPSHOT  SANDBOX  CREATED  SIZE\n" {
		t.Errorf("snapshot ls lists a partial snapshot: %q", ls.stdout)
	}
	l.tent(t, "resume", id).expect(t, 125, "no snapshot to resume from")
	if st := l.lsStates(t); len(st) != 1 || st[id] != "stopped" {
		t.Errorf("ls -o json after the crash: %v, want %s stopped", st, id)
	}
	l.records(t)
	l.tent(t, "rm", "--all").expect(t, 0)
	l.assertCleanedUp(t, []int{initPID, sleeping[0]}, rec.Cgroups, tmp)
}

func TestCrashCreate(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	tmp := crashTempDir(t)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	isSupervisor := func(c string) bool { return strings.HasPrefix(c, "tent-supervisor\x00"+l.dir+"\x00") }
	// Kill tent create while its supervisor provisions: stop the
	// supervisor at moments, until it is stopped with its init started
	// (in its cgroups, for root, who always gets them) and its record not
	// yet saved (it saves it before it says ready), then kill tent create
	// and let the supervisor go on. If it was ready first, try again.
	var sup, initPID int
	var cgroups []string
	stopped := func(pid int) bool { st, _, ok := procStat(pid); return !ok || st == "T" || st == "t" }
	for attempt := 1; sup == 0; attempt++ {
		if attempt > 5 {
			t.Fatal("tent create's supervisor was ready every time before its init could be seen")
		}
		create, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "create", "--cow", src + ":/work"}, env: []string{"TMPDIR=" + tmp}}.start(t)
		var found []int
		if !poll(10*time.Second, func() bool { found = procs(isSupervisor); return len(found) == 1 }) {
			t.Fatalf("no supervisor appeared: %v", found)
		}
		s := found[0]
		poll(10*time.Second, func() bool {
			if syscall.Kill(s, syscall.SIGSTOP) != nil || !poll(time.Second, func() bool { return stopped(s) }) {
				return true // gone
			}
			if len(l.records(t)) != 0 {
				return true // too late
			}
			if initPID = initOf(s); initPID != 0 {
				cgroups = sandboxCgroups(initPID)
				if os.Geteuid() != 0 || len(cgroups) > 0 {
					sup = s
					return true
				}
			}
			_ = syscall.Kill(s, syscall.SIGCONT)
			return false
		})
		if sup != 0 {
			if err := create.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
		_ = syscall.Kill(s, syscall.SIGCONT)
		r := wait(t, create, stdout, stderr, start)
		if sup == 0 {
			r.expect(t, 0)
			l.tent(t, "rm", "--all").expect(t, 0)
			continue
		}
		if r.code != -1 || r.stdout != "" {
			t.Fatalf("tent create was not killed before printing an id: %+v", r)
		}
	}
	// The supervisor provisions the sandbox, finds nobody to tell its id
	// to, and ends it.
	if !poll(20*time.Second, func() bool { return !alive(sup) }) {
		t.Fatalf("the supervisor of a killed tent create still runs:\n%s", processReport(sup, l.dir))
	}
	if len(cgroups) == 0 {
		t.Log("no cgroups for this user's sandbox: none to check")
	}
	if st := l.lsStates(t); len(st) != 0 {
		t.Errorf("ls -o json after the orphan's teardown: %v, want none", st)
	}
	l.tent(t, "rm", "--all").expect(t, 0)
	l.assertCleanedUp(t, []int{initPID}, cgroups, tmp)
}

// sandboxCgroups returns the directories of pid's tent-* cgroups, found
// through /proc/PID/cgroup and this process's cgroup mounts.
func sandboxCgroups(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !sandboxCgroupName(filepath.Base(parts[2])) {
			continue
		}
		for _, m := range strings.Split(string(mountinfo), "\n") {
			// id parent major:minor root mountpoint options - fstype source superoptions
			pre, post, ok := strings.Cut(m, " - ")
			f, g := strings.Fields(pre), strings.Fields(post)
			if !ok || len(f) < 5 || len(g) < 3 {
				continue
			}
			v2 := parts[1] == "" && g[0] == "cgroup2"
			v1 := parts[1] != "" && g[0] == "cgroup" && strings.Contains(","+g[2]+",", ","+strings.Split(parts[1], ",")[0]+",")
			if rel, ok := strings.CutPrefix(parts[2], f[3]); (v1 || v2) && ok {
				out = append(out, filepath.Join(f[4], rel))
			}
		}
	}
	return out
}

// sandboxCgroupName reports whether name is a sandbox cgroup's: "tent-"
// and 16 hex digits (not, say, a test harness's tent-vm-NAME.scope).
func sandboxCgroupName(name string) bool {
	hex, ok := strings.CutPrefix(name, "tent-")
	if !ok || len(hex) != 16 {
		return false
	}
	_, err := strconv.ParseUint(hex, 16, 64)
	return err == nil
}

// processReport describes pid for a failure: its state and each thread's
// wait channel, its children, and the logs of the state directory dir.
func processReport(pid int, dir string) string {
	var b strings.Builder
	st, ppid, _ := procStat(pid)
	fmt.Fprintf(&b, "pid %d state %s ppid %d\n", pid, st, ppid)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		wchan, _ := os.ReadFile(task + "/wchan")
		syscallLine, _ := os.ReadFile(task + "/syscall")
		fmt.Fprintf(&b, "  task %s: wchan %s syscall %s", filepath.Base(task), wchan, syscallLine)
	}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	fmt.Fprintf(&b, "children: %s\n", children)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range logs {
		data, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "%s:\n%s\n", p, data)
	}
	return b.String()
}
