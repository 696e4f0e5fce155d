package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The attack: a local user reads another user's secrets from `ps`. A
// value given with --env must appear on no process's command line, nor
// in tent ls -o json / tent inspect (names only, values with --show-env),
// and still reach the sandbox.
func TestCreateKeepsEnvValuesSecret(t *testing.T) {
	l := newLife(t)
	secret := fmt.Sprintf("s3cr3t-%d-value", os.Getpid())
	envFile := writeFile(t, filepath.Join(t.TempDir(), "env"), "FILE_TOKEN="+secret+"-file\n")
	id := l.create(t, "--env", "API_TOKEN="+secret, "--env=OTHER="+secret+"-eq", "--env-file", envFile)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret: %q", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	for _, args := range [][]string{{"ls", "-o", "json"}, {"inspect", id}} {
		r := l.tent(t, args...)
		r.expect(t, 0)
		if strings.Contains(r.stdout, secret) {
			t.Errorf("tent %v prints the secret:\n%s", args, r.stdout)
		}
		for _, name := range []string{"API_TOKEN", "OTHER", "FILE_TOKEN"} {
			if !strings.Contains(r.stdout, name) {
				t.Errorf("tent %v does not name %s:\n%s", args, name, r.stdout)
			}
		}
	}
	r := l.tent(t, "inspect", "--show-env", id)
	r.expect(t, 0)
	var rec struct {
		Spec struct{ Env []string } `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rec.Spec.Env, "\n"), "API_TOKEN="+secret) {
		t.Errorf("inspect --show-env: env %q, want API_TOKEN's value", rec.Spec.Env)
	}
	r = l.tent(t, "exec", id, "--", "sh", "-c", `echo "$API_TOKEN $OTHER $FILE_TOKEN"`)
	r.expect(t, 0)
	if want := secret + " " + secret + "-eq " + secret + "-file"; strings.TrimSpace(r.stdout) != want {
		t.Errorf("inside: %q, want %q", r.stdout, want)
	}
}

// A refusal of tent create reaches the caller whole, as tent run prints
// it: what is missing and the fix, over several lines (it was cut to its
// first line, "this host cannot enforce what the policy asks for:").
// Best effort cannot lift this one, so the message does not offer it.
func TestCreateRefusalIsWhole(t *testing.T) {
	l := newLife(t)
	create := l.tent(t, "create", "--tier", "reduced", "--hostname", "box")
	create.expect(t, 125, "this host cannot enforce what the policy asks for:\n",
		"  - tier: the reduced tier runs one-shot commands only", "(fix: enable user namespaces")
	if strings.Contains(create.stderr, "--best-effort") {
		t.Errorf("the refusal suggests --best-effort, which cannot lift it: %q", create.stderr)
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("the refused create left %d files in the state directory", len(ents))
	}
}

// Every refusal's advice, followed literally, works: a refusal that
// suggests --best-effort goes on with it, and one that does not would
// not (it still refuses with --best-effort). The cases are the refusals
// this host can produce for this user; one the host does not refuse is
// logged and skipped.
func TestRefusalAdviceFollowed(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	cases := [][]string{
		{"run", "--memory", "64M", "--pids", "64", "--cpus", "0.5", "--", "true"},
		{"run", "--tier", "reduced", "--hostname", "box", "--", "true"},
		{"run", "--tier", "reduced", "--net", "limited", "--allow-host", "example.com", "--", "true"},
		{"run", "--tier", "reduced", "--rw", gitRepoDir(t), "--", "true"},
		{"create", "--tier", "reduced", "--hostname", "box"},
		{"create", "--memory", "64M", "--pids", "64"},
		// As root, the caller's own (root-owned) directory: written as
		// root, which needs the default profile's set-id refusal.
		{"run", "--seccomp", "unconfined", "--rw", t.TempDir(), "--", "true"},
	}
	for _, args := range cases {
		r := l.tent(t, args...)
		if r.code == 0 {
			if args[0] == "create" {
				l.tent(t, "rm", strings.TrimSpace(r.stdout)).expect(t, 0)
			}
			t.Logf("%v: not refused on this host", args)
			continue
		}
		if r.code != 125 {
			t.Errorf("%v: exit %d (stderr %q), want 125 or 0", args, r.code, r.stderr)
			continue
		}
		advised := strings.Contains(r.stderr, "--best-effort")
		again := l.tent(t, append([]string{args[0], "--best-effort"}, args[1:]...)...)
		switch {
		case advised && again.code != 0:
			t.Errorf("%v suggests --best-effort (%q), but with it: exit %d, %q", args, r.stderr, again.code, again.stderr)
		case !advised && again.code == 0:
			t.Errorf("%v does not suggest --best-effort (%q), which would have worked", args, r.stderr)
		}
		if args[0] == "create" && again.code == 0 {
			l.tent(t, "rm", strings.TrimSpace(again.stdout)).expect(t, 0)
		}
	}
}

// As root, a rw or cow mount of a filesystem that cannot be idmapped
// (ramfs, mounted in a private mount namespace) is refused without
// --best-effort, which would not help, and with the advice to mount it
// --ro, which does.
func TestRefusalAdviceUnidmappable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("idmapped mounts are a root caller's")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	t.Parallel()
	dir := t.TempDir()
	inRamfs := func(args ...string) result {
		cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", `mount -t ramfs ramfs "$1" && shift && exec "$@"`, "sh", dir, tentBin}, args...)...)
		cmd.Env = baseEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		r := result{}
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		r.stdout, r.stderr = stdout.String(), stderr.String()
		return r
	}
	for _, access := range []string{"--rw", "--cow"} {
		r := inRamfs("run", access, dir+":/x", "--", "true")
		r.expect(t, 125, "cannot idmap this mount", "fix: mount it --ro")
		if strings.Contains(r.stderr, "--best-effort") || strings.Contains(r.stderr, "--cow") {
			t.Errorf("%s: the refusal suggests what cannot help: %q", access, r.stderr)
		}
		inRamfs("run", "--best-effort", access, dir+":/x", "--", "true").expect(t, 125, "cannot idmap this mount")
	}
	inRamfs("run", "--ro", dir+":/x", "--", "true").expect(t, 0)
}

// gitRepoDir returns a directory holding a git repository (no git
// needed: a HEAD is what tent looks for), owned by a non-root user as
// root (sandboxDir's).
func gitRepoDir(t *testing.T) string {
	t.Helper()
	dir := sandboxDir(t)
	git := filepath.Join(dir, ".git")
	for _, d := range []string{git, filepath.Join(git, "hooks"), filepath.Join(git, "objects"), filepath.Join(git, "refs")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"HEAD", "config"} {
		if err := os.WriteFile(filepath.Join(git, f), []byte{}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 { // the directory's owner's, as a clone would be
		err := filepath.Walk(git, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// --pids 0 is refused, naming the flag, instead of meaning no limit.
func TestPidsZeroIsRefused(t *testing.T) {
	tent(t, "run", "--pids", "0", "--", "true").expect(t, 125, `--pids "0"`, "at least 1")
}

// sandboxDir returns a host directory for a sandbox's rw mount: as root,
// owned by an unprivileged uid (the sandbox's files then show as that
// user's on the host, as a user's own checkout would).
func sandboxDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The attack: --report names a file in a directory the command can
// write, and the command puts a symlink to a host file, a FIFO, or a
// symlinked directory there. tent must neither write through the link,
// nor hang on the FIFO, nor put the report in the link's directory.
func TestReportIsNotRedirectedByTheCommand(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "victim")
	writeFile(t, victim, "KEEP\n")
	victimDir := t.TempDir()
	for name, plant := range map[string]string{
		"symlink": "ln -sf " + victim + " /w/run.json",
		"fifo":    "rm -f /w/run.json && mkfifo /w/run.json",
	} {
		t.Run(name, func(t *testing.T) {
			w := sandboxDir(t)
			report := filepath.Join(w, "run.json")
			r := tent(t, "run", "--rw", w+":/w", "--report", report, "--", "sh", "-c", plant)
			r.expect(t, 0)
			if b, _ := os.ReadFile(victim); string(b) != "KEEP\n" {
				t.Fatalf("the victim now holds %q", b)
			}
			fi, err := os.Lstat(report)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("the report path is %v (%v), want the report as a regular file", fi, err)
			}
			var rep map[string]any
			if b, _ := os.ReadFile(report); json.Unmarshal(b, &rep) != nil {
				t.Errorf("the report is not JSON: %q", b)
			}
		})
	}
	t.Run("symlinked directory", func(t *testing.T) {
		w := sandboxDir(t)
		if err := os.Mkdir(filepath.Join(w, "out"), 0o777); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(filepath.Join(w, "out"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		r := tent(t, "run", "--rw", w+":/w", "--report", filepath.Join(w, "out", "run.json"), "--", "sh", "-c", "rm -rf /w/out && ln -s "+victimDir+" /w/out")
		r.expect(t, 125, "--report")
		if ents, _ := os.ReadDir(victimDir); len(ents) != 0 {
			t.Fatalf("the report went into the symlink's directory: %v", ents)
		}
	})
}

// The attack: the sandbox names a file so that tent diff's listing forges
// a line ("\nD /w/passwd") and sends an escape sequence to the terminal.
// Names are printed quoted, one change per line.
func TestDiffQuotesHostileNames(t *testing.T) {
	l := newLife(t)
	src := t.TempDir()
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	id := l.create(t, "--cow", src+":/w")
	l.tent(t, "exec", id, "--", "sh", "-c", `touch "/w/a
D passwd" "/w/$(printf '\033[31mred')" /w/plain`).expect(t, 0)
	r := l.tent(t, "diff", id)
	r.expect(t, 0)
	want := "A \"/w/\\033[31mred\"\nA \"/w/a\\nD passwd\"\nA /w/plain\n"
	if r.stdout != want {
		t.Errorf("tent diff printed %q, want %q", r.stdout, want)
	}
}
