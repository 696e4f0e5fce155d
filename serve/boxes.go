package serve

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Actions when a sandbox's timeout expires (E2B's lifecycle.onTimeout).
const (
	onTimeoutKill  = "kill"
	onTimeoutPause = "pause"
)

// box is what the server keeps about one sandbox of its backend: its
// E2B settings and its timeout. A sandbox the server did not create (one
// of `tent create`'s, or one left by an earlier server) gets a box when
// first used, with no timeout until a client sets one.
type box struct {
	id      string
	token   string // its envd access token, for signed URLs
	added   time.Time
	streams chan struct{} // in-sandbox requests in flight

	// Guarded by Server.mu.
	created       bool      // provisioned by this server
	endAt         time.Time // zero: no timeout
	timer         *time.Timer
	gen           uint64 // bumped whenever timer changes
	onTimeout     string
	pauseFiles    bool // a pause at the timeout keeps only the files
	autoResume    bool
	allowInternet *bool
	network       *networkConfig
	ports         *portSettings // nil: public, no mask
	// pauseSnap is the snapshot of a filesystem-only pause (see
	// pauseFiles), removed once the sandbox is resumed from it or killed.
	pauseSnap *snapRecord
	cpuNanos  int64 // the last metrics sample, for the CPU percentage
	cpuAt     time.Time
}

// box returns sandbox id's box, adding one if the server has none.
func (s *Server) box(id string) *box {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxLocked(id)
}

func (s *Server) boxLocked(id string) *box {
	b := s.boxes[id]
	if b == nil {
		b = &box{id: id, token: s.accessToken(id), added: time.Now(), streams: make(chan struct{}, s.opts.MaxStreamsPerSandbox), onTimeout: onTimeoutKill}
		s.boxes[id] = b
	}
	return b
}

// armLocked sets b's timeout to d from now and (re)starts its timer; d
// <= 0 stops it. The caller holds s.mu.
func (s *Server) armLocked(b *box, d time.Duration) {
	defer s.markDirtyLocked()
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if d <= 0 {
		return
	}
	b.endAt = time.Now().Add(d)
	gen, id := b.gen, b.id
	b.timer = time.AfterFunc(d, func() { s.expire(id, gen) })
}

// stopLocked stops b's timer, keeping endAt. The caller holds s.mu.
func (s *Server) stopLocked(b *box) {
	defer s.markDirtyLocked()
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

// expire runs when sandbox id's timeout (the arming gen) ends: it kills
// the sandbox, or pauses it when its lifecycle says so.
func (s *Server) expire(id string, gen uint64) {
	s.mu.Lock()
	b := s.boxes[id]
	if s.closed || b == nil || b.gen != gen {
		s.mu.Unlock()
		return
	}
	b.timer = nil
	action, pauseFiles := b.onTimeout, b.pauseFiles
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
	defer cancel()
	if action == onTimeoutPause && pauseFiles {
		if err := s.pauseFiles(ctx, id); err == nil {
			s.log.Info("sandbox paused, its files kept: its timeout expired", "id", id)
			return
		} else {
			s.log.Warn("pausing at the timeout failed: killing the sandbox", "id", id, "err", err)
		}
	} else if action == onTimeoutPause {
		if err := handle.Open(ctx, s.b, id).Suspend(ctx); err == nil {
			s.log.Info("sandbox paused: its timeout expired", "id", id)
			return
		} else {
			s.log.Warn("pausing at the timeout failed: killing the sandbox", "id", id, "err", err)
		}
	}
	if err := s.kill(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Error("killing a sandbox at its timeout failed", "id", id, "err", err)
		return
	}
	s.log.Info("sandbox killed: its timeout expired", "id", id)
}

// kill terminates sandbox id and forgets it.
func (s *Server) kill(ctx context.Context, id string) error {
	err := handle.Open(ctx, s.b, id).Terminate(ctx)
	if err == nil || errors.Is(err, sandbox.ErrNotFound) {
		var snap *snapRecord
		s.mu.Lock()
		if b := s.boxes[id]; b != nil {
			s.stopLocked(b)
			snap = b.pauseSnap
			delete(s.boxes, id)
		}
		s.mu.Unlock()
		s.forget(id)
		s.dropPauseSnapshot(snap)
	}
	return err
}

// pauseFiles pauses sandbox id keeping only its files, as E2B's
// filesystem-only pause (pause with memory: false, autoPauseMemory:
// false) does: a snapshot of its writable layers (/tmp, its home, /root,
// cow mounts), then Handle.Stop, which ends every process. A connect
// resumes it under the same id from that snapshot (Handle.Resume): a
// cold boot, with its files and without its processes. The snapshot is
// the server's own, not listed; it is removed once the sandbox is resumed
// from it or killed.
func (s *Server) pauseFiles(ctx context.Context, id string) error {
	// No rules change while it stops.
	s.netMu.Lock()
	defer s.netMu.Unlock()
	release, err := s.acquireProvision(ctx)
	if err != nil {
		return err
	}
	defer release()
	snap, err := handle.Open(ctx, s.b, id).Snapshot(ctx)
	if err != nil {
		return err
	}
	rec := &snapRecord{id: snap.ID, dir: snap.Dir, sandboxID: id, created: time.Now()}
	if err := handle.Open(ctx, s.b, id).Stop(ctx); err != nil {
		s.dropPauseSnapshot(rec)
		return err
	}
	s.forget(id) // its processes and watchers are gone
	s.mu.Lock()
	b := s.boxLocked(id)
	s.stopLocked(b)
	old := b.pauseSnap
	b.pauseSnap = rec
	s.markDirtyLocked()
	s.mu.Unlock()
	s.dropPauseSnapshot(old)
	return nil
}

// dropPauseSnapshot removes a filesystem-only pause's snapshot (nil:
// none); a failure is logged.
func (s *Server) dropPauseSnapshot(rec *snapRecord) {
	s.dropSnapshot(rec, "a filesystem-only pause")
}

// dropSnapshot removes a snapshot the server took for itself (what it was
// for names it in the log), not one it lists.
func (s *Server) dropSnapshot(rec *snapRecord, what string) {
	if rec == nil || rec.dir == "" {
		return
	}
	if err := removeSnapshotDir(rec); err != nil {
		s.log.Warn("removing the snapshot of "+what+" failed", "snapshot", rec.id, "err", err)
	}
}

// get returns sandbox id, which must be named by its whole id (E2B's
// ids are never abbreviated): anything else is 404.
func (s *Server) get(ctx context.Context, id string) (sandbox.Info, error) {
	info, err := handle.Open(ctx, s.b, id).Info(ctx)
	if err == nil && info.ID != id {
		err = sandbox.ErrNotFound
	}
	if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrAmbiguous) {
		return sandbox.Info{}, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return info, err
}

// autoResumes reports whether sandbox id resumes on its first request.
func (s *Server) autoResumes(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	return b != nil && b.autoResume
}

// boxView is a copy of a box's settings, read under the lock.
type boxView struct {
	created       bool
	endAt         time.Time
	onTimeout     string
	pauseFiles    bool
	autoResume    bool
	allowInternet *bool
	network       *networkConfig
	ports         *portSettings
}

// view returns a copy of sandbox id's settings (the zero view, with
// onTimeout kill, when the server keeps none).
func (s *Server) view(id string) boxView {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil {
		return boxView{onTimeout: onTimeoutKill}
	}
	return boxView{created: b.created, endAt: b.endAt, onTimeout: b.onTimeout, pauseFiles: b.pauseFiles,
		autoResume: b.autoResume, allowInternet: b.allowInternet, network: b.network, ports: b.ports}
}

// Close stops every timeout and, unless keep is true, terminates the
// sandboxes this server created, in parallel. Sandboxes it did not
// create are left alone either way. Requests still in flight fail. The
// state file, if any, is written a last time: a server started later
// over the same backend and file takes up the sandboxes kept.
func (s *Server) Close(ctx context.Context, keep bool) error {
	s.mu.Lock()
	s.closed = true
	var ids []string
	for id, b := range maps.All(s.boxes) {
		s.stopLocked(b)
		if b.created {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if c, ok := s.api.(interface{ Close() }); ok {
		defer c.Close()
	}
	defer s.stopSaving()
	if keep {
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() {
			if err := s.kill(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				errs[i] = err
				return
			}
			s.log.Info("sandbox killed: the server is stopping", "id", id)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopSaving writes the state file a last time and stops its writer.
func (s *Server) stopSaving() {
	if s.saveStop != nil {
		close(s.saveStop)
		<-s.saveDone
		s.saveStop = nil
	}
}
