package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The state directory survives a bad record, sandboxes that stopped say
// why, and what killed creates left goes with tent rm --all.

// stateFiles lists the names in the state directory that belong to
// sandbox id (its record, socket, log, temporaries).
func (l life) stateFiles(id string) []string {
	ents, _ := os.ReadDir(l.dir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), id) || strings.HasPrefix(e.Name(), "."+id) {
			out = append(out, e.Name())
		}
	}
	return out
}

// lsJSON is tent ls -o json, each sandbox as a map.
func (l life) lsJSON(t *testing.T) map[string]map[string]any {
	t.Helper()
	r := l.tent(t, "ls", "-o", "json")
	r.expect(t, 0)
	var all []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	out := map[string]map[string]any{}
	for _, m := range all {
		out[m["id"].(string)] = m
	}
	return out
}

// A record cut short (a full disk) while its sandbox runs: tent ls lists
// the others and marks it broken with its file and the error (table, -q,
// -o json, --format, --filter); names resolve, create works; inspect and
// exec of it say what is wrong; tent rm of it ends its sandbox through
// its live supervisor (processes, cgroups, cow layers) and removes its
// files.
func TestBrokenRecordCLI(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	tmp := crashTempDir(t)
	victim := l.createCow(t, tmp)
	keep := l.create(t, "--name", "keep")
	rec := l.records(t)[victim]
	initPID := initOf(rec.Supervisor)
	if initPID == 0 || len(rec.Layers) != 1 {
		t.Fatalf("record %+v: supervisor without an init (%d) or no cow layer", rec, initPID)
	}
	sleep := uniqueSleep(3)
	l.tent(t, "exec", victim, "--", "sh", "-c", "(sleep "+sleep+" >/dev/null 2>&1 &)").expect(t, 0)
	var sleeping []int
	if !poll(10*time.Second, func() bool { sleeping = procs(cmdline("sleep", sleep)); return len(sleeping) == 1 }) {
		t.Fatalf("the background sleep did not start: %v", sleeping)
	}
	path := filepath.Join(l.dir, victim+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	const jsonErr = "unexpected end of JSON input"

	r := l.tent(t, "ls")
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^`+keep+`\s+keep\s+running\s`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^`+victim+`\s+broken \(`+regexp.QuoteMeta(path+": "+jsonErr)+`\)\s*$`).MatchString(lines[2]) {
		t.Errorf("ls with a broken record:\n%s", r.stdout)
	}
	if r := l.tent(t, "ls", "-q"); r.stdout != keep+"\n"+victim+"\n" {
		t.Errorf("ls -q: %q, want both ids", r.stdout)
	}
	all := l.lsJSON(t)
	if v := all[victim]; len(all) != 2 || all[keep]["state"] != "running" || len(v) != 4 || v["state"] != "broken" || v["record"] != path || v["error"] != jsonErr {
		t.Errorf("ls -o json: %v", all)
	}
	if r := l.tent(t, "ls", "--format", "{{.ID}} {{.State}} {{.Record}} {{.Error}}", "--filter", "state=broken"); r.stdout != victim+" broken "+path+" "+jsonErr+"\n" {
		t.Errorf("ls --format --filter state=broken: %q", r.stdout)
	}
	l.tent(t, "exec", "keep", "--", "true").expect(t, 0)
	third := l.create(t, "--name", "third")
	l.tent(t, "inspect", victim).expect(t, 125, "sandbox "+victim+": broken state record "+path+": "+jsonErr)
	l.tent(t, "exec", victim, "--", "true").expect(t, 125, "broken state record")

	l.tent(t, "rm", victim).expect(t, 0)
	for _, pid := range []int{rec.Supervisor, initPID, sleeping[0]} {
		if !poll(5*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("process %d outlived tent rm of the broken record", pid)
		}
	}
	for _, c := range rec.Cgroups {
		if _, err := os.Stat(c); err == nil {
			t.Errorf("cgroup %s left after tent rm of the broken record", c)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 1 || ents[0].Name() != "src" {
		t.Errorf("cow layers after tent rm of the broken record: %v, want only src", ents)
	}
	if f := l.stateFiles(victim); len(f) != 0 {
		t.Errorf("files of the broken record after tent rm: %v", f)
	}
	if st := l.lsStates(t); len(st) != 2 || st[keep] != "running" || st[third] != "running" {
		t.Errorf("ls after rm: %v", st)
	}
}

// Records broken every way (empty, garbage, a symlink, a directory, and
// one of a running sandbox whose supervisor idles) do not stop tent rm
// --all: every sandbox goes, its processes and cgroups too, and nothing
// is left; a symlink's target is never touched.
func TestBrokenRecordsRmAll(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	running := l.create(t, "--name", "running")
	emptied := l.create(t, "--idle-after", "50ms")
	sup, initPID := supervisorAndInit(t, l, emptied)
	supRunning, _ := supervisorAndInit(t, l, running)
	cgroups := l.records(t)[emptied].Cgroups
	// Its supervisor gives way to its idle holder, which the removal
	// wakes.
	idle := func() bool {
		c, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/cmdline")
		return strings.HasPrefix(string(c), "tent-idle-supervisor\x00")
	}
	if !poll(30*time.Second, idle) {
		t.Fatal("the supervisor never idled")
	}
	if err := os.WriteFile(filepath.Join(l.dir, emptied+".json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "target.json")
	if err := os.WriteFile(outside, []byte(`{"id": "cccc000000000003"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, make := range map[string]func(string) error{
		"aaaa000000000001": func(p string) error { return os.WriteFile(p, []byte("garbage"), 0o600) },
		"bbbb000000000002": func(p string) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o700) },
		"cccc000000000003": func(p string) error { return os.Symlink(outside, p) },
	} {
		if err := make(filepath.Join(l.dir, name+".json")); err != nil {
			t.Fatal(err)
		}
	}
	all := l.lsJSON(t)
	for id, e := range map[string]string{
		"aaaa000000000001": "invalid character 'g' looking for beginning of value",
		"bbbb000000000002": "it is a directory",
		"cccc000000000003": "it is a symlink (never followed)",
		emptied:            "unexpected end of JSON input",
	} {
		if all[id]["state"] != "broken" || all[id]["error"] != e {
			t.Errorf("ls -o json of %s: %v, want broken, %q", id, all[id], e)
		}
	}
	if all[running]["state"] != "running" || len(all) != 5 {
		t.Errorf("ls -o json: %v", all)
	}
	l.tent(t, "rm", "--all").expect(t, 0)
	for _, pid := range []int{sup, initPID, supRunning} {
		if !poll(5*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("process %d outlived tent rm --all", pid)
		}
	}
	for _, c := range cgroups {
		if _, err := os.Stat(c); err == nil {
			t.Errorf("cgroup %s left after tent rm --all", c)
		}
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state directory after rm --all: %v", ents)
	}
	if b, err := os.ReadFile(outside); err != nil || len(b) == 0 {
		t.Errorf("the symlink's target: %q, %v", b, err)
	}
}

// A sandbox whose supervisor was killed says why it stopped, in ls (the
// table, -o json, --format) and inspect.
func TestKilledSupervisorSaysWhy(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--name", "victim")
	sup, _ := supervisorAndInit(t, l, id)
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !poll(10*time.Second, func() bool { return !alive(sup) }) {
		t.Fatal("the supervisor outlived SIGKILL")
	}
	want := "its supervisor (pid " + strconv.Itoa(sup) + ") died: killed or crashed"
	if r := l.tent(t, "ls"); !strings.Contains(r.stdout, " stopped ("+want+") ") {
		t.Errorf("ls:\n%s\nwant stopped (%s)", r.stdout, want)
	}
	if v := l.lsJSON(t)[id]; v["state"] != "stopped" || v["reason"] != want {
		t.Errorf("ls -o json: %v, want stopped, %q", v, want)
	}
	if r := l.tent(t, "ls", "--format", "{{.State}}: {{.Reason}}"); r.stdout != "stopped: "+want+"\n" {
		t.Errorf("ls --format: %q", r.stdout)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", "victim").stdout), &rec); err != nil || rec["state"] != "stopped" || rec["reason"] != want {
		t.Errorf("inspect: %v, %v; want stopped, %q", rec, err, want)
	}
	l.tent(t, "rm", "victim").expect(t, 0)
}

// What a create killed before its sandbox was saved leaves (a 0-byte
// log, a record's temporary) goes with tent rm --all and with the next
// create; a create in progress (its supervisor stopped before it saved
// the record) is never touched, and ends well.
func TestKilledCreateLeftoversGo(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	if err := os.Chmod(l.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	leftovers := func(id string) {
		for _, n := range []string{id + ".log", "." + id + ".12345.tmp"} {
			if err := os.WriteFile(filepath.Join(l.dir, n), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	leftovers("aaaa000000000001")
	// A log whose lock a process holds: a create in progress.
	held := filepath.Join(l.dir, "bbbb000000000002.log")
	f, err := os.OpenFile(held, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "rm", "--all").expect(t, 0)
	if got := l.stateFiles("aaaa000000000001"); len(got) != 0 {
		t.Errorf("tent rm --all left a killed create's files: %v", got)
	}
	if got := l.stateFiles("bbbb000000000002"); len(got) != 1 {
		t.Errorf("tent rm --all removed the log of a create in progress: %v", got)
	}
	// The next create sweeps too.
	leftovers("cccc000000000003")
	id := l.create(t)
	if got := l.stateFiles("cccc000000000003"); len(got) != 0 {
		t.Errorf("create left a killed create's files: %v", got)
	}
	l.tent(t, "rm", id).expect(t, 0)
	f.Close()

	// A real create, its supervisor stopped before it saved its record.
	isSupervisor := func(c string) bool { return strings.HasPrefix(c, "tent-supervisor\x00"+l.dir+"\x00") }
	stopped := func(pid int) bool { st, _, ok := procStat(pid); return !ok || st == "T" || st == "t" }
	for attempt := 1; ; attempt++ {
		if attempt > 5 {
			t.Fatal("tent create's supervisor saved its record every time before it could be stopped")
		}
		create, stdout, stderr, start := invocation{args: []string{"--state-dir", l.dir, "create"}}.start(t)
		var found []int
		if !poll(10*time.Second, func() bool { found = procs(isSupervisor); return len(found) == 1 }) {
			t.Fatalf("no supervisor appeared: %v", found)
		}
		s := found[0]
		if err := syscall.Kill(s, syscall.SIGSTOP); err != nil || !poll(10*time.Second, func() bool { return stopped(s) }) {
			t.Fatalf("stopping the supervisor: %v", err)
		}
		early := len(l.records(t)) == 0
		if early {
			l.tent(t, "rm", "--all").expect(t, 0)
		}
		ents, _ := os.ReadDir(l.dir)
		_ = syscall.Kill(s, syscall.SIGCONT)
		r := wait(t, create, stdout, stderr, start)
		r.expect(t, 0)
		id := strings.TrimSpace(r.stdout)
		if !early {
			l.tent(t, "rm", id).expect(t, 0)
			continue
		}
		// The create's own files stay: its log, and, when its supervisor
		// was stopped later in its start, its socket and the temporary
		// of the record it was saving (locked, so no sweep takes it).
		var names []string
		hasLog := false
		for _, e := range ents {
			n := e.Name()
			names = append(names, n)
			hasLog = hasLog || n == id+".log"
			if n != id+".log" && n != id+".sock" && !(strings.HasPrefix(n, "."+id+".") && strings.HasSuffix(n, ".tmp")) {
				t.Errorf("tent rm --all during a create: %s is not the create's", n)
			}
		}
		if !hasLog {
			t.Errorf("tent rm --all during a create: %v left, want its log", names)
		}
		if got := l.stateFiles(id); slices.ContainsFunc(got, func(n string) bool { return strings.HasSuffix(n, ".tmp") }) {
			t.Errorf("the create left a temporary: %v", got)
		}
		l.tent(t, "exec", id, "--", "true").expect(t, 0)
		break
	}
}

// A sandbox whose init died (killed on the host, the OOM killer) ends:
// its record says stopped, and why, in ls and inspect; exec refuses it.
// (It read running, with no init, before.)
func TestKilledInitSaysWhy(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--name", "victim")
	sup, initPID := supervisorAndInit(t, l, id)
	if err := syscall.Kill(initPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !poll(30*time.Second, func() bool { return l.lsStates(t)[id] == "stopped" }) {
		t.Fatalf("ls -o json after the init's kill: %v, want %s stopped", l.lsStates(t), id)
	}
	const want = "its init was killed (SIGKILL)"
	if v := l.lsJSON(t)[id]; v["reason"] != want || v["ended"] == nil {
		t.Errorf("ls -o json: %v, want the reason %q and when it ended", v, want)
	}
	if r := l.tent(t, "ls"); !strings.Contains(r.stdout, " stopped ("+want+") ") {
		t.Errorf("ls:\n%s", r.stdout)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", "victim").stdout), &rec); err != nil || rec["reason"] != want {
		t.Errorf("inspect: %v, %v", rec, err)
	}
	l.tent(t, "exec", "victim", "--", "true").expect(t, 125, "is stopped")
	if !poll(10*time.Second, func() bool { return !alive(sup) }) {
		t.Errorf("the supervisor of the ended sandbox still runs")
	}
	l.tent(t, "rm", "victim").expect(t, 0)
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state left after rm: %v", ents)
	}
}
