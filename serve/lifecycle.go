package serve

import (
	"context"
	"net/http"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// A sandbox's life after its create: its details, kill, timeout and
// refresh, pause, and connect or resume.

// handleGet serves GET /sandboxes/{sandboxID}: E2B's SandboxDetail.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.box(info.ID) // it hands out the token: signed URLs may follow
	v := s.view(info.ID)
	d := sandboxDetail{
		listedSandbox:       s.listed(info, v),
		EnvdAccessToken:     s.accessToken(info.ID),
		Domain:              s.domain(),
		AllowInternetAccess: internetView(info.Spec.Network, v.allowInternet),
		Network:             networkView(info.Spec.Network, v.network),
		Lifecycle:           lifecycle{OnTimeout: v.onTimeout, AutoResume: v.autoResume},
	}
	writeJSON(w, http.StatusOK, d)
}

// handleKill serves DELETE /sandboxes/{sandboxID}: 204, or 404 for a
// sandbox that does not exist.
func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("sandboxID")
	if _, err := s.get(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := s.detached(r)
	defer cancel()
	if err := s.kill(ctx, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("sandbox killed", "id", id)
	w.WriteHeader(http.StatusNoContent)
}

// handleSetTimeout serves POST /sandboxes/{sandboxID}/timeout: the
// sandbox now expires timeout seconds from now (sooner or later than
// before; 0, as in E2B, ends it now: killed, or paused when its
// lifecycle says so). A paused sandbox keeps the new end until it is
// resumed.
func (s *Server) handleSetTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Timeout == nil {
		s.writeError(w, r, errorf(http.StatusBadRequest, "timeout: required (seconds)"))
		return
	}
	s.extend(w, r, req.Timeout, "timeout", 0, false)
}

// handleRefresh serves POST /sandboxes/{sandboxID}/refreshes: the
// sandbox lives at least duration seconds more (default DefaultTimeout).
func (s *Server) handleRefresh(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.extend(w, r, req.Duration, "duration", 1, true)
}

// extend sets (or, with onlyLonger, extends) a sandbox's timeout of
// sec seconds (the request's field), at least minSec.
func (s *Server) extend(w http.ResponseWriter, r *http.Request, sec *int64, field string, minSec int64, onlyLonger bool) {
	d, info, err := s.timedTarget(r, sec, field, minSec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.setEnd(info, d, onlyLonger)
	w.WriteHeader(http.StatusNoContent)
}

// timedTarget reads the timeout in a request's field (sec seconds, at
// least minSec; DefaultTimeout when nil), then finds the sandbox its
// path names.
func (s *Server) timedTarget(r *http.Request, sec *int64, field string, minSec int64) (time.Duration, sandbox.Info, error) {
	d, err := s.timeout(sec, field, minSec)
	if err != nil {
		return 0, sandbox.Info{}, err
	}
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	return d, info, err
}

// setEnd makes sandbox info end d from now (with onlyLonger, no sooner
// than it already does). Only a running sandbox's timer runs.
func (s *Server) setEnd(info sandbox.Info, d time.Duration, onlyLonger bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxLocked(info.ID)
	end := time.Now().Add(d)
	if onlyLonger && end.Before(b.endAt) {
		return
	}
	if info.State != sandbox.StateRunning || s.closed {
		s.stopLocked(b)
		b.endAt = end
		return
	}
	s.armLocked(b, max(d, time.Nanosecond)) // 0 disarms; a timeout of 0 ends it now
}

// handlePause serves POST /sandboxes/{sandboxID}/pause: the sandbox's
// processes are frozen (the cgroup freezer) until a connect resumes
// them; its timeout stops meanwhile. With memory: false only its files
// are kept (see pauseFiles). 409 when it is not running.
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	var req pauseRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	filesOnly := req.Memory != nil && !*req.Memory
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if info.State != sandbox.StateRunning {
		s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s is %s, not running", info.ID, stateOf(info.State)))
		return
	}
	if filesOnly {
		if caps := s.b.Capabilities(); !caps.Snapshot || !caps.Resume {
			s.writeError(w, r, errorf(http.StatusBadRequest, "memory: false: a filesystem-only pause needs snapshots and resume, which this backend does not offer"))
			return
		}
		ctx, cancel := s.detached(r)
		defer cancel()
		if err := s.pauseFiles(ctx, info.ID); err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.Info("sandbox paused, its files kept", "id", info.ID)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if caps := s.b.Capabilities(); !caps.Suspend {
		s.writeError(w, r, errorf(http.StatusBadRequest, "pausing freezes the sandbox with the cgroup freezer, which this host does not give sandboxes (cgroup: %s)", caps.CgroupVersion))
		return
	}
	ctx, cancel := s.detached(r)
	defer cancel()
	if err := handle.Open(ctx, s.b, info.ID).Suspend(ctx); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.mu.Lock()
	s.stopLocked(s.boxLocked(info.ID))
	s.mu.Unlock()
	s.log.Info("sandbox paused", "id", info.ID)
	w.WriteHeader(http.StatusNoContent)
}

// handleConnect serves POST /v2/sandboxes/{sandboxID}/connect (and the
// older /sandboxes/{sandboxID}/connect): a running sandbox's timeout is
// extended to at least the request's (200); a paused one is resumed with
// it (201).
func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	s.connect(w, r, true)
}

// handleResume serves the older POST /sandboxes/{sandboxID}/resume: a
// paused sandbox is resumed (201); a running one is a 409.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	s.connect(w, r, false)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request, runningOK bool) {
	var req connectRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	d, info, err := s.timedTarget(r, req.Timeout, "timeout", 1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	tmpl := templateOf(info)
	if info.State == sandbox.StateRunning {
		if !runningOK {
			s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s is already running", info.ID))
			return
		}
		s.setEnd(info, d, true)
		writeJSON(w, http.StatusOK, s.sandboxResponse(info.ID, tmpl))
		return
	}
	ctx, cancel := s.detached(r)
	defer cancel()
	if req.Memory != nil && !*req.Memory && info.State == sandbox.StateSuspended {
		// connect({onResume: 'reboot'}) of a sandbox paused with its
		// memory: a cold boot from its files, as after a filesystem-only
		// pause.
		if caps := s.b.Capabilities(); !caps.Snapshot || !caps.Resume {
			s.writeError(w, r, errorf(http.StatusBadRequest, "memory: false: a cold boot from the sandbox's files needs snapshots and resume, which this backend does not offer"))
			return
		}
		if err := s.pauseFiles(ctx, info.ID); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if _, err := s.resume(ctx, info.ID, d, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxResponse(info.ID, tmpl))
}

// resume resumes sandbox id (thaws it, or provisions it again from its
// latest snapshot when it has ended) and arms its timeout d. With
// onlyLonger, a timeout set while it was paused that ends later wins.
func (s *Server) resume(ctx context.Context, id string, d time.Duration, onlyLonger bool) (sandbox.Info, error) {
	release, err := s.acquireProvision(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	info, err := handle.Open(ctx, s.b, id).Resume(ctx)
	release()
	if err != nil {
		return sandbox.Info{}, err
	}
	s.mu.Lock()
	b := s.boxLocked(id)
	if left := time.Until(b.endAt); onlyLonger && left > d {
		d = left
	}
	if !s.closed {
		s.armLocked(b, d)
	}
	snap := b.pauseSnap // resumed from: no longer needed
	b.pauseSnap = nil
	s.markDirtyLocked()
	s.mu.Unlock()
	s.dropPauseSnapshot(snap)
	s.log.Info("sandbox resumed", "id", id, "timeout", d)
	return info, nil
}
