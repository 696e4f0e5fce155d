package supervised

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
)

// openIdling opens a backend whose supervisors hand off to their idle
// holder after 20 ms; it skips where the build has no holder (cgo).
func openIdling(t *testing.T) *Backend {
	t.Helper()
	if !namespaces.IdleHolderAvailable() {
		t.Skip("this build has no idle holder (cgo)")
	}
	b, err := Open(t.TempDir(), Options{IdleAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitSupervisorIdle waits (30 s at most) for the supervisor sup to have
// handed off to its idle holder.
func waitSupervisorIdle(t *testing.T, sup int) {
	t.Helper()
	idle := func() bool {
		c, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/cmdline")
		return strings.HasPrefix(string(c), namespaces.IdleSupervisorArg0+"\x00")
	}
	for deadline := time.Now().Add(30 * time.Second); !idle(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the supervisor never idled")
		}
	}
}

// A sandbox whose commands keep capabilities keeps them across its
// supervisor's idle hand-off: the resumed supervisor's plan has them.
func TestIdleHandOffKeepsCapabilities(t *testing.T) {
	b := openIdling(t)
	ctx := context.Background()
	caps := []string{"CAP_DAC_OVERRIDE"}
	info := provision(t, b, sandbox.Spec{Identity: sandbox.Identity{Capabilities: caps, AmbientCapabilities: caps}})
	t.Cleanup(func() { _ = sbOf(t, b, info.ID).Terminate(ctx) })
	rec, err := b.st.load(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitSupervisorIdle(t, rec.Supervisor)
	res, err := sbOf(t, b, info.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"grep", "CapEff", "/proc/self/status"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "CapEff:\t0000000000000002" {
		t.Errorf("after the hand-off: %q, want CAP_DAC_OVERRIDE (0x2)", got)
	}
}
