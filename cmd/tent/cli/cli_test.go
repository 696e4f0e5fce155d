package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tent --version and tent version print the same line: the module
// version (devel and the VCS commit for a development build) and Go's.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	v, f := tent(t, "version"), tent(t, "--version")
	v.expect(t, 0)
	f.expect(t, 0)
	if !regexp.MustCompile(`^tent (v\S+|devel( [0-9a-f]{12})?(\+dirty)?) go\S+\n$`).MatchString(v.stdout) || f.stdout != v.stdout {
		t.Errorf("tent version %q, tent --version %q", v.stdout, f.stdout)
	}
}

// tent completion prints each shell's script; another shell is refused.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, head := range map[string]string{
		"bash": "# bash completion V2 for tent", "zsh": "#compdef tent", "fish": "# fish completion for tent",
	} {
		r := tent(t, "completion", shell)
		r.expect(t, 0)
		if !strings.HasPrefix(r.stdout, head) {
			t.Errorf("tent completion %s starts %q, want %q", shell, r.stdout[:min(40, len(r.stdout))], head)
		}
	}
	tent(t, "completion", "tcsh").expect(t, 125, "want bash, zsh or fish, not tcsh")
}

// Every read verb takes -o json and --format; ls filters.
func TestReadVerbsOutput(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	// Names that no id prefix (hex) can equal: "a" was ambiguous with a
	// sandbox whose id began with a.
	a := l.create(t, "--name", "alpha", "--label", "team=x", "--label", "tier=1")
	b := l.create(t, "--name", "bravo", "--label", "team=y")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "--format", "{{.Name}} {{.State}} {{index .Labels \"team\"}}"}, "alpha running x\nbravo running y\n"},
		{[]string{"ls", "-q", "--filter", "label=team=y"}, b + "\n"},
		{[]string{"ls", "-q", "--filter", "label=tier"}, a + "\n"},
		{[]string{"ls", "-q", "--filter", "name=alpha", "--filter", "state=running"}, a + "\n"},
		{[]string{"ls", "-q", "--filter", "state=stopped"}, ""},
		{[]string{"ls", "-q", "--filter", "id=" + b[:5]}, b + "\n"},
		{[]string{"inspect", "--format", "{{.Name}}", "alpha", "bravo"}, "alpha\nbravo\n"},
	} {
		if r := l.tent(t, tc.args...); r.code != 0 || r.stdout != tc.want {
			t.Errorf("tent %q: exit %d, %q (%s); want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"ls", "--filter", "color=red"}, `tent: --filter "color=red": unknown filter "color" (want label, name, state or id)` + "\n"},
		{[]string{"ls", "--filter", "state=gone"}, `tent: --filter "state=gone": want state=running, suspended, stopped or broken` + "\n"},
		{[]string{"ls", "-o", "yaml"}, `tent: -o "yaml": want table or json` + "\n"},
		{[]string{"ls", "--format", "{{.Nope"}, "tent: --format: template: format:1: unclosed action\n"},
		{[]string{"snapshot", "ls", "-o", "xml"}, `tent: -o "xml": want table or json` + "\n"},
		{[]string{"doctor", "-o", "xml"}, `tent: -o "xml": want table or json` + "\n"},
	} {
		r := l.tent(t, tc.args...)
		r.expect(t, 125)
		if r.stderr != tc.stderr {
			t.Errorf("tent %q: stderr %q, want %q", tc.args, r.stderr, tc.stderr)
		}
	}
	// The table: human ages.
	if r := l.tent(t, "ls"); !regexp.MustCompile(`(?m)^` + a + `\s+alpha\s+running\s+(\d+ seconds? ago|just now|\d+ minutes ago)\s+team=x,tier=1\s*$`).MatchString(r.stdout) {
		t.Errorf("tent ls table:\n%s", r.stdout)
	}
	// inspect of one is an object, ls -o json a list.
	var one map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", "alpha", "-o", "json").stdout), &one); err != nil || one["id"] != a {
		t.Errorf("inspect -o json: %v %v", one, err)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(l.tent(t, "ls", "-o", "json").stdout), &list); err != nil || len(list) != 2 {
		t.Errorf("ls -o json: %v %v", list, err)
	}
	// doctor -o json is doctor --json.
	dj, do := l.tent(t, "doctor", "--json"), l.tent(t, "doctor", "-o", "json")
	var checks struct{ Checks []map[string]any }
	if err := json.Unmarshal([]byte(do.stdout), &checks); err != nil || len(checks.Checks) == 0 || dj.code != do.code {
		t.Errorf("doctor -o json: exit %d (--json: %d), %v: %s", do.code, dj.code, err, do.stdout)
	}
	// Snapshots: sizes for humans in the table, bytes in JSON.
	l.tent(t, "exec", "alpha", "--", "sh", "-c", "head -c 300000 /dev/urandom > /tmp/blob").expect(t, 0)
	snap := strings.TrimSpace(l.tent(t, "snapshot", "alpha").stdout)
	var snaps []struct {
		ID        string `json:"id"`
		SandboxID string `json:"sandbox_id"`
		Size      int64  `json:"size"`
	}
	if err := json.Unmarshal([]byte(l.tent(t, "snapshot", "ls", "-o", "json").stdout), &snaps); err != nil || len(snaps) != 1 || snaps[0].ID != snap || snaps[0].SandboxID != a || snaps[0].Size < 300000 {
		t.Fatalf("snapshot ls -o json: %+v %v", snaps, err)
	}
	table := l.tent(t, "snapshot", "ls").stdout
	if want := humanSize(snaps[0].Size); !regexp.MustCompile(`(?m)^`+snap+`\s+`+a+`\s+(\d+ seconds? ago|just now)\s+`+regexp.QuoteMeta(want)+`\s*$`).MatchString(table) || !strings.HasSuffix(want, "K") {
		t.Errorf("snapshot ls table (size %d, want %s):\n%s", snaps[0].Size, want, table)
	}
	if r := l.tent(t, "snapshot", "ls", "-q"); r.stdout != snap+"\n" {
		t.Errorf("snapshot ls -q: %q", r.stdout)
	}
}

func TestHumanSizeAndAge(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0K", 1536: "1.5K", 400020508: "381.5M", 5 << 30: "5.0G"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
	now := time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0: "just now", time.Second: "1 second ago", 90 * time.Second: "90 seconds ago", 5 * time.Minute: "5 minutes ago",
		3 * time.Hour: "3 hours ago", 72 * time.Hour: "3 days ago",
	} {
		if got := humanAge(now.Add(-d), now); got != want {
			t.Errorf("humanAge(-%s) = %q, want %q", d, got, want)
		}
	}
}

// tent diff -o json gives each change with its mount.
func TestDiffJSON(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("a\n"), 0o644)
	r0 := l.tent(t, "create", "--cow", src+":/work")
	if r0.code == 125 && strings.Contains(r0.stderr, "idmap") {
		t.Skipf("a root caller's cow mounts need idmapped mounts, unsupported here: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	l.tent(t, "exec", id, "--", "sh", "-c", "cd /work && rm a.txt && printf x > 'new\nline'").expect(t, 0)
	r := l.tent(t, "diff", id, "-o", "json")
	want := `[
  {
    "kind": "deleted",
    "path": "/work/a.txt",
    "mount": "/work"
  },
  {
    "kind": "added",
    "path": "/work/new\nline",
    "mount": "/work"
  }
]
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("diff -o json: exit %d, %q (%s); want %q", r.code, r.stdout, r.stderr, want)
	}
	if r := l.tent(t, "diff", id, "--format", "{{.Kind}}"); r.stdout != "deleted\nadded\n" {
		t.Errorf("diff --format: %q", r.stdout)
	}
}

// tent stats shows each running sandbox's memory, CPU and tasks from
// its cgroup, with the limits.
func TestStats(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	r0 := l.tent(t, "create", "--memory", "64M", "--pids", "32")
	if r0.code == 125 && strings.Contains(r0.stderr, "cgroup") {
		t.Skipf("no cgroup for this user: %s", r0.stderr)
	}
	r0.expect(t, 0)
	id := strings.TrimSpace(r0.stdout)
	// An idle sandbox may have used less than one clock tick of CPU (the
	// unit of the /proc times a v1 host without cpuacct falls back to):
	// burn some first, so that the CPU time is certain to be positive.
	l.tent(t, "exec", id, "--", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").expect(t, 0)
	r := l.tent(t, "stats", "--no-stream", "-o", "json", id)
	r.expect(t, 0)
	var views []statsView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 {
		t.Fatalf("stats -o json: %v\n%s", err, r.stdout)
	}
	v := views[0]
	if v.ID != id || v.Error != "" || v.MemoryLimit != 64<<20 || v.PidsLimit != 32 || v.Pids < 1 || v.MemoryBytes <= 0 || v.CPUNanos <= 0 {
		t.Errorf("stats of %s: %+v", id, v)
	}
	table := l.tent(t, "stats", "--no-stream").stdout
	if !regexp.MustCompile(`(?m)^ID\s+NAME\s+CPU %\s+CPU TIME\s+MEM USAGE / LIMIT\s+MEM %\s+PIDS\n` + id + `\s+\d+\.\d\d%\s+\S+\s+\S+ / 64\.0M\s+\d+\.\d\d%\s+\d+ / 32\s*$`).MatchString(table) {
		t.Errorf("stats table:\n%s", table)
	}
	l.tent(t, "stats", "--no-stream", "nope").expect(t, 125, "no such sandbox")
}

// A sandbox whose --timeout ran out stays listed, stopped with the
// reason, until tent rm (as docker ps -a shows an exited container); it
// vanished from tent ls. The test waits for the end, however long it
// takes, and never races the timeout.
func TestTimedOutSandboxIsListedUntilRm(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--name", "brief", "--timeout", "300ms")
	if !poll(60*time.Second, func() bool { return l.lsStates(t)[id] == "stopped" }) {
		t.Fatalf("the timed-out sandbox: ls -o json %v, want %s stopped", l.lsStates(t), id)
	}
	r := l.tent(t, "ls", "--format", "{{.ID}} {{.Name}} {{.State}} {{.Reason}}")
	if want := id + " brief stopped timed out after 300ms\n"; r.stdout != want {
		t.Errorf("ls: %q, want %q", r.stdout, want)
	}
	if r := l.tent(t, "ls"); !strings.Contains(r.stdout, " stopped (timed out after 300ms) ") {
		t.Errorf("ls table:\n%s", r.stdout)
	}
	l.tent(t, "exec", id, "--", "true").expect(t, 125, "is stopped")
	l.tent(t, "create", "--name", "brief").expect(t, 125, `the name "brief" is already used by sandbox `+id+" (stopped)")
	l.tent(t, "rm", "brief").expect(t, 0)
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("state directory after rm: %v", ents)
	}
}

// The progress line: nothing before the first tick, one line per tick
// rewritten in place, erased at the end; nothing at all for a quick
// operation. (Ticks are the test's: no clock is raced.)
func TestProgressLine(t *testing.T) {
	var b strings.Builder
	ticks := make(chan time.Time)
	stopped := false
	stop := showProgress(&b, "snapshotting abc", ticks, func() { stopped = true })
	ticks <- time.Time{}
	ticks <- time.Time{}
	stop()
	if want := "\rtent: snapshotting abc... 1s\rtent: snapshotting abc... 2s\r\033[K"; b.String() != want || !stopped {
		t.Errorf("progress wrote %q (ticker stopped: %v), want %q", b.String(), stopped, want)
	}
	b.Reset()
	showProgress(&b, "quick", make(chan time.Time), func() {})()
	if b.String() != "" {
		t.Errorf("a quick operation's progress wrote %q", b.String())
	}
}
