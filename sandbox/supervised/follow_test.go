package supervised

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// blockedWriter signals its first write, then holds it until its ctx
// ends: a client that stopped reading.
type blockedWriter struct {
	ctx   context.Context
	wrote chan struct{}
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	close(w.wrote)
	<-w.ctx.Done()
	return 0, w.ctx.Err()
}

// fdCount is how many descriptors process pid has open.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A follow whose caller stops reading holds the command back in the
// supervisor; the caller's ctx ending ends the follow there too: the
// command goes on to its end, and the supervisor is left with no
// descriptor of the follow (its pipe, its connection).
func TestFollowCancelledEndsInTheSupervisor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	sb := sbOf(t, b, info.ID)
	warm, err := sb.Start(ctx, sandbox.ExecRequest{Args: []string{"true"}}, sandbox.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	before := fdCount(t, info.SupervisorPID)

	p, err := sb.Start(ctx, sandbox.ExecRequest{Args: []string{"head", "-c", "4000000", "/dev/zero"}}, sandbox.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	w := &blockedWriter{ctx: fctx, wrote: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := p.Follow(fctx, 1, 0, w)
		done <- err
	}()
	<-w.wrote
	fcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow cancelled: %v, want context.Canceled", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait once the follower left: %+v, %v", res, err)
	}
	sandboxtest.Eventually(t, "the supervisor to close the follow's descriptors", func() bool {
		return fdCount(t, info.SupervisorPID) == before
	})
}
