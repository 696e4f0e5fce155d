package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
)

// TestCommandOOMScore checks that a command runs CommandOOMScoreAdj
// above its init's OOM score (as root, and as a user with no cgroup), and
// its children with it, also one forked at once: the init never raises
// its own (see TestOOMKillerSparesTheInit).
func TestCommandOOMScore(t *testing.T) {
	ctx := context.Background()
	sb := provision(t, sandbox.Spec{})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", sb.Info().InitPID))
	if err != nil {
		t.Fatal(err)
	}
	base, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(min(base+namespaces.CommandOOMScoreAdj, 1000))
	// The score is written just after the command's exec and before the
	// init reports it started: the shell reads it once Start has
	// returned. Through the rlimit trampoline (NoFile) and as root it is
	// there before the command runs at all: read at once too.
	limited := provision(t, sandbox.Spec{Limits: sandbox.Limits{NoFile: 512}})
	for _, c := range []struct {
		name        string
		sb          *sandbox.Sandbox
		asRoot, now bool
	}{{"a command", sb, false, false}, {"a command as root", sb, true, true}, {"a command with rlimits", limited, false, true}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		// The subshell is forked at once, often before its shell has the
		// score: it is raised with it then (oomScore.raiseDescendants).
		// (Its stdin would be /dev/null: it reads the pipe as fd 3.)
		job, err := c.sb.Start(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "exec 3<&0; cat /proc/self/oom_score_adj; (read x <&3; cat /proc/self/oom_score_adj) & wait"}, Stdin: r, AsRoot: c.asRoot})
		r.Close()
		if err != nil {
			w.Close()
			if c.asRoot && errors.Is(err, namespaces.ErrRootNeedsUserNS) {
				continue
			}
			t.Fatal(err)
		}
		_, _ = w.Write([]byte("go\n"))
		w.Close()
		res, err := job.Wait()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		// Without c.now, the first cat may read the score as it changes
		// ("0\n", then "00\n" from offset 2 of "1000\n"): the last line
		// is the subshell's.
		if got[len(got)-1] != want || (c.now && (len(got) != 2 || got[0] != want)) {
			t.Errorf("%s's oom_score_adj: %q (stdout %q, stderr %q); want %s (its init's is %d)", c.name, got, res.Stdout, res.Stderr, want, base)
		}
	}
	if got, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", sb.Info().InitPID)); err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(base) {
		t.Errorf("the init's oom_score_adj after its commands: %q, %v; want %d", got, err, base)
	}
}
