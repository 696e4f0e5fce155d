package supervised

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

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

// fdTargets is what the descriptors of process pid refer to (a pipe's or
// a socket's is its inode: a new one never matches an old one).
func fdTargets(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	targets := make(map[string]bool, len(ents))
	for _, e := range ents {
		if to, err := os.Readlink(dir + "/" + e.Name()); err == nil {
			targets[to] = true
		}
	}
	return targets
}

// newSince is what now refers to that before did not.
func newSince(before, now map[string]bool) []string {
	var added []string
	for to := range now {
		if !before[to] {
			added = append(added, to)
		}
	}
	return added
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
	// What the supervisor holds now, the warm-up's descriptors perhaps
	// still among them (closed a moment after its Wait): the follow must
	// leave nothing that is not in this set.
	before := fdTargets(t, info.SupervisorPID)

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
	// Bounded generously (a loaded machine), and naming what is left.
	added := newSince(before, fdTargets(t, info.SupervisorPID))
	for deadline := time.Now().Add(30 * time.Second); len(added) > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		added = newSince(before, fdTargets(t, info.SupervisorPID))
	}
	if len(added) != 0 {
		t.Errorf("the supervisor still holds descriptors the follow opened: %v", added)
	}
}
