package cli

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// Names are unique per state directory: a second tent create --name box
// is refused (125, naming the sandbox that has it), and exec/rm never act
// on the wrong sandbox. A reference matching two sandboxes is refused.
func TestNamesAreUnique(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	first := l.create(t, "--name", "box")
	r := l.tent(t, "create", "--name", "box")
	r.expect(t, 125)
	if want := "tent: the name \"box\" is already used by sandbox " + first + " (running): choose another name, or tent rm " + first + "\n"; r.stderr != want {
		t.Errorf("second create --name box: stderr %q, want %q", r.stderr, want)
	}
	if st := l.lsStates(t); len(st) != 1 {
		t.Errorf("after the refused create: %v, want only %s", st, first)
	}
	l.tent(t, "create", "--name", "0123456789abcdef").expect(t, 125, `--name "0123456789abcdef": has the shape of a sandbox id`)
	l.tent(t, "create", "--name", "-x").expect(t, 125, `--name "-x": want letters, digits`)
	l.tent(t, "create", "--name", "a/b").expect(t, 125, `--name "a/b": want letters, digits`)

	// A name that is another sandbox's id prefix matches both.
	second := l.create(t, "--name", first[:4])
	r = l.tent(t, "exec", first[:4], "--", "true")
	r.expect(t, 125)
	names := []string{first + " (box)", second + " (" + first[:4] + ")"}
	if first > second {
		names[0], names[1] = names[1], names[0]
	}
	if want := "tent: ambiguous sandbox reference: \"" + first[:4] + "\" matches 2 sandboxes: " + strings.Join(names, ", ") + "; use a full id\n"; r.stderr != want {
		t.Errorf("exec of an ambiguous reference: stderr %q, want %q", r.stderr, want)
	}
	l.tent(t, "rm", first[:4]).expect(t, 125, "ambiguous")
	if st := l.lsStates(t); len(st) != 2 {
		t.Errorf("rm of an ambiguous reference removed something: %v", st)
	}
	l.tent(t, "rm", "box").expect(t, 0)
	// The name is free again once its sandbox is removed.
	l.create(t, "--name", "box")
}

// tent create --report is refused: the report is tent run's.
func TestCreateRefusesReport(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	r := l.tent(t, "create", "--report", "/dev/null")
	r.expect(t, 125)
	if want := "tent: --report is tent run's (one command's report); for a sandbox made by tent create, see tent inspect ID -o json\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if st := l.lsStates(t); len(st) != 0 {
		t.Errorf("a refused create left %v", st)
	}
}

// tent net ID with no rule flags prints the policy (it cleared every
// rule); -o json and --format print it too.
func TestNetPrintsThePolicy(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t, "--allow-host", "example.org", "--allow-host", "*.pypi.org", "--deny-host", "evil.example")
	want := "net: limited\nallow-host: example.org\nallow-host: *.pypi.org\ndeny-host: evil.example\n"
	for i := 0; i < 2; i++ { // printing changes nothing
		if r := l.tent(t, "net", id); r.code != 0 || r.stdout != want {
			t.Errorf("tent net %s: exit %d, %q; want %q", id, r.code, r.stdout, want)
		}
	}
	r := l.tent(t, "net", id, "-o", "json")
	if w := `{
  "id": "` + id + `",
  "mode": "limited",
  "allowed_hosts": [
    "example.org",
    "*.pypi.org"
  ],
  "denied_hosts": [
    "evil.example"
  ]
}
`; r.stdout != w {
		t.Errorf("tent net -o json: %q, want %q", r.stdout, w)
	}
	if r := l.tent(t, "net", id, "--format", "{{.Mode}} {{join .AllowedHosts \",\"}}"); r.stdout != "limited example.org,*.pypi.org\n" {
		t.Errorf("tent net --format: %q", r.stdout)
	}
	l.tent(t, "net", id, "--net", "none").expect(t, 0)
	if r := l.tent(t, "net", id); r.stdout != "net: none\n" {
		t.Errorf("after --net none: %q", r.stdout)
	}
	l.tent(t, "net", id, "--allow-host", "x.org", "-o", "json").expect(t, 125, "-o and --format print the policy")
}

// Concurrent creates of one name: exactly one wins (the names lock is
// held from the check until the record is saved).
func TestConcurrentCreatesOfOneName(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	type started struct {
		inv invocation
		r   chan result
	}
	var all []started
	for range 3 {
		s := started{inv: invocation{args: []string{"--state-dir", l.dir, "create", "--name", "race"}}, r: make(chan result, 1)}
		cmd, stdout, stderr, start := s.inv.start(t)
		go func() { s.r <- waitNoFatal(cmd, stdout, stderr, start) }()
		all = append(all, s)
	}
	codes := map[int]int{}
	for _, s := range all {
		var r result
		select {
		case r = <-s.r:
		case <-time.After(60 * time.Second): // a hang guard, as wait's
			t.Fatalf("tent %q did not finish in 60s", s.inv.args)
		}
		codes[r.code]++
		if r.code == 125 && !strings.Contains(r.stderr, `the name "race" is already used by sandbox `) {
			t.Errorf("a losing create: %q", r.stderr)
		}
	}
	if codes[0] != 1 || codes[125] != 2 {
		t.Errorf("exit codes of three concurrent creates of one name: %v, want one 0 and two 125", codes)
	}
	if st := l.lsStates(t); len(st) != 1 {
		t.Errorf("sandboxes after the race: %v", st)
	}
}

// waitNoFatal is wait for a goroutine other than the test's: it never
// calls t.Fatal (a process that does not finish is the test's 60 s
// guard's business in the caller).
func waitNoFatal(cmd *exec.Cmd, stdout, stderr *bytes.Buffer, start time.Time) result {
	err := cmd.Wait()
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code = -1
		r.stderr += err.Error()
	}
	return r
}

// tent net refuses to replace the rules of a sandbox with header
// transforms (made by tent serve): they are rules a new policy replaces,
// and their values are not in the record it has, so it would drop them.
// Printing the policy still works.
func TestNetKeepsHeaderTransforms(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	b, err := supervised.Open(l.dir, supervised.Options{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.Provision(context.Background(), sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"api.example.com"},
				Secrets: []netpolicy.Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "X-Token", Value: "header-value-0123"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l.tent(t, "net", info.ID, "--allow-host", "api.example.com", "--allow-host", "other.example.com").expect(t, 125, "header transforms (X-Token for api.example.com)", "tent serve")
	if r := l.tent(t, "net", info.ID); r.code != 0 || r.stdout != "net: limited\nallow-host: api.example.com\n" {
		t.Errorf("tent net %s after the refusal: exit %d, %q", info.ID, r.code, r.stdout)
	}
}
