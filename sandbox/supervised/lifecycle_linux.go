package supervised

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// Resume thaws a suspended sandbox; a stopped one (its supervisor gone)
// is provisioned again, under its id and name, from its latest snapshot
// (sandbox.ErrTerminated without one).
func (s *Sandbox) Resume(ctx context.Context) (sandbox.Info, error) {
	rec, err := s.rec()
	if err != nil {
		return sandbox.Info{}, err
	}
	if rec.live() {
		_, err := call(ctx, rec, request{Op: opResume}, nil)
		if err == nil {
			return s.Info(ctx)
		}
		// A supervisor that was just killed closes its socket before it
		// is gone: once it is, the sandbox is a stopped one.
		if !errors.Is(err, sandbox.ErrStopped) || !waitGone(rec) {
			return sandbox.Info{}, err
		}
		rec.State = sandbox.StateStopped
	}
	snaps, err := s.b.Snapshots(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	var latest *sandbox.Snapshot
	for _, s := range snaps {
		if s.SandboxID == rec.ID {
			latest = s
		}
	}
	if latest == nil {
		return sandbox.Info{}, fmt.Errorf("%w: sandbox %s is stopped and has no snapshot to resume from (tent rm %s)", sandbox.ErrTerminated, rec.ID, rec.ID)
	}
	s.b.st.Reclaim(rec) // the old layers are superseded by the snapshot's
	fo := &forkOverrides{Name: rec.Name, Labels: rec.Labels}
	spec := latest.Spec
	spec.Name, spec.Labels = rec.Name, rec.Labels
	return s.b.spawn(ctx, launch{ID: rec.ID, Spec: spec, FromSnapshot: latest.Dir, Overrides: fo})
}

// StopReason is the Reason of a sandbox stopped by Handle.Stop.
const StopReason = "stopped"

// Stop ends the sandbox and keeps its record, stopped (Reason
// StopReason), as its Limits.Timeout running out does; Resume provisions
// it again from its latest snapshot. A sandbox whose supervisor is gone
// is stopped already.
func (s *Sandbox) Stop(ctx context.Context) error {
	rec, err := s.rec()
	if err != nil {
		return err
	}
	if !rec.live() {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, removeAnswerTimeout)
	_, err = call(rctx, rec, request{Op: opStop}, nil)
	cancel()
	switch {
	case err == nil:
	case errors.Is(err, sandbox.ErrStopped):
		return nil
	default:
		return err
	}
	if !waitGone(rec) { // the supervisor exits once its teardown is done
		return fmt.Errorf("sandbox %s: its supervisor (pid %d) did not exit after stopping it", rec.ID, rec.Supervisor)
	}
	return nil
}

// Terminate ends the sandbox and removes its record. Of a sandbox whose
// supervisor is gone (killed: its processes died with it, or die once
// their frozen cgroup is thawed) it reclaims what is left first. A
// sandbox whose record is broken (see [RecordError]) is removed too: its
// supervisor, if one still listens on its socket, removes the sandbox
// (or is killed), and its files go.
func (s *Sandbox) Terminate(ctx context.Context) error {
	rec, err := s.rec()
	if re := (*RecordError)(nil); errors.As(err, &re) && re.ID == s.id {
		return s.b.removeBroken(ctx, s.id)
	}
	if err != nil {
		return err
	}
	if rec.live() {
		// The supervisor answers a removal at once, then tears down.
		rctx, cancel := context.WithTimeout(ctx, removeAnswerTimeout)
		_, err := call(rctx, rec, request{Op: opRemove}, nil)
		cancel()
		switch {
		case err == nil, errors.Is(err, sandbox.ErrStopped):
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// A supervisor that does not answer (stopped, stuck) is
			// killed: its sandbox's processes die with its init, and
			// what is left is reclaimed below, as after a crash.
			s.b.log.Warn("the supervisor did not answer the removal: killing it", "id", rec.ID, "pid", rec.Supervisor)
			killSupervisor(rec)
		default:
			return err
		}
		waitGone(rec) // the supervisor exits once its teardown is done
	} else if supervisorAlive(rec) {
		// Stopped, its supervisor still tearing it down (it records the
		// end first; a child supervisor's init, which the caller's
		// parent reaps, has exited before): nothing is reclaimed, or
		// removed, under it.
		waitGone(rec)
	}
	s.b.st.Reclaim(rec)
	return s.b.st.removeFiles(rec.ID)
}

// removeAnswerTimeout bounds the wait for a supervisor's answer to a
// removal, which it gives before its teardown: one that has not answered
// by then is stopped or stuck.
var removeAnswerTimeout = 10 * time.Second

// killSupervisor sends SIGKILL to rec's supervisor (stopped or not),
// through a pidfd taken before checking that the pid is still that
// process (its start time), so a recycled pid is never signalled.
func killSupervisor(rec *record) {
	if rec.Supervisor <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(rec.Supervisor, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if supervisorAlive(rec) {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// waitGone waits, five seconds at most, for rec's supervisor to exit, and
// reports whether it did.
func waitGone(rec *record) bool {
	for i := 0; i < 500 && supervisorAlive(rec); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return !supervisorAlive(rec)
}
