package supervised

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// The test binary is the supervisors' program too: Provision re-executes
// it (/proc/self/exe) in the supervisor's mode, which sandbox.Init runs.
func TestMain(m *testing.M) {
	sandbox.Init()
	os.Exit(m.Run())
}

// probeTarget is where the test probe is mounted inside sandboxes.
const probeTarget = sandboxtest.ProbeTarget

// probeDir holds the static testprobe binary (see sandboxtest.ProbeDir).
var probeDir = sandboxtest.ProbeDir

// open returns a backend on a fresh state directory whose sandboxes are
// terminated when the test ends.
func open(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(t.TempDir(), Options{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		all, _ := b.List(context.Background())
		for _, i := range all {
			if err := b.Terminate(context.Background(), i.ID); err != nil {
				t.Errorf("terminate %s: %v", i.ID, err)
			}
		}
	})
	return b
}

func provision(t *testing.T, b *Backend, spec sandbox.Spec) sandbox.Info {
	t.Helper()
	info, err := b.Provision(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// execOut runs argv in sandbox id and returns its stdout.
func execOut(t *testing.T, b *Backend, id string, argv ...string) (string, *sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := b.Exec(context.Background(), id, sandbox.ExecRequest{Args: argv, Stdout: &out})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String(), res
}
