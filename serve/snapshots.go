package serve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// maxForks bounds a fork request's count.
const maxForks = 16

// snapRecord is a snapshot taken through the server's API. Snapshots
// outlive their sandbox (they are the backend's); the server only
// remembers, until it exits, which it took and the names given to them.
type snapRecord struct {
	id        string
	dir       string // where the backend keeps it (Snapshot.Dir)
	sandboxID string
	names     []string
	created   time.Time
}

// snapshotID resolves a template id that names no template: the newest
// snapshot given that name, else the id itself (a snapshot id, which
// the backend resolves).
func (s *Server) snapshotID(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range slices.Backward(s.snapshots) {
		if slices.Contains(r.names, name) {
			return r.id
		}
	}
	return name
}

// handleSnapshot serves POST /sandboxes/{sandboxID}/snapshots: the
// sandbox's writable layers and spec are saved (the sandbox keeps
// running); Sandbox.create(snapshotID or name) starts a sandbox from it.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	var req snapshotRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Name != "" && !policy.ValidName(req.Name) {
		s.writeError(w, r, errorf(http.StatusBadRequest, "name %q: a snapshot name is 1 to 128 letters, digits, '.', '_' or '-'", req.Name))
		return
	}
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := s.detached(r)
	defer cancel()
	snap, err := s.snapshot(ctx, info.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rec := &snapRecord{id: snap.ID, dir: snap.Dir, sandboxID: info.ID, created: time.Now(), names: []string{}}
	if req.Name != "" {
		rec.names = append(rec.names, req.Name)
	}
	s.mu.Lock()
	s.snapshots = append(s.snapshots, rec)
	s.mu.Unlock()
	s.log.Info("snapshot taken", "sandbox", info.ID, "snapshot", snap.ID, "name", req.Name)
	writeJSON(w, http.StatusCreated, snapshotInfo{SnapshotID: rec.id, Names: rec.names})
}

// snapshot takes a snapshot of sandbox id in a provisioning turn, for
// a snapshot or a fork (whose policy names the same secrets, resolved
// from the store as the sandbox's are).
func (s *Server) snapshot(ctx context.Context, id string) (*sandbox.Snapshot, error) {
	release, err := s.acquireProvision(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return handle.Open(ctx, s.b, id).Snapshot(ctx)
}

// handleListSnapshots serves GET /snapshots: the snapshots taken through
// this server, newest first, filtered by sandboxID and by name (a name
// or an id), paginated.
func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, start := defaultListLimit, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			s.writeError(w, r, errorf(http.StatusBadRequest, "limit: %q is not 1 to %d", v, maxListLimit))
			return
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, "nextToken: not a token this server gave"))
			return
		}
		start = n
	}
	sbx, name := q.Get("sandboxID"), q.Get("name")
	s.mu.Lock()
	var all []snapshotInfo
	for _, rec := range slices.Backward(s.snapshots) {
		if sbx != "" && rec.sandboxID != sbx || name != "" && rec.id != name && !slices.Contains(rec.names, name) {
			continue
		}
		all = append(all, snapshotInfo{SnapshotID: rec.id, Names: slices.Clone(rec.names)})
	}
	s.mu.Unlock()
	out := []snapshotInfo{}
	if start < len(all) {
		out = all[start:min(len(all), start+limit)]
	}
	if start+limit < len(all) {
		w.Header().Set("X-Next-Token", strconv.Itoa(start+limit))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleFork serves POST /sandboxes/{sandboxID}/fork: one snapshot of
// the sandbox (which keeps running), then count independent sandboxes
// from it, each reported on its own (201 with one result per fork).
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	var req forkRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > maxForks {
		s.writeError(w, r, errorf(http.StatusBadRequest, "count: %d is not 1 to %d", count, maxForks))
		return
	}
	d, info, err := s.timedTarget(r, req.Timeout, "timeout", 1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := s.detached(r)
	defer cancel()
	snap, err := s.snapshot(ctx, info.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The snapshot is only the forks' starting point, not listed: they
	// are independent of it (see handleDeleteSnapshot), so it goes once
	// they are made.
	defer s.dropSnapshot(&snapRecord{id: snap.ID, dir: snap.Dir}, "a fork")
	src := s.view(info.ID)
	tmpl := templateOf(info)
	results := make([]forkResult, count)
	for i := range results {
		results[i] = s.forkOne(ctx, snap.ID, tmpl, d, src)
	}
	writeJSON(w, http.StatusCreated, results)
}

// forkOne starts one fork of snapshot snapID, with the settings of the
// sandbox it was taken of.
func (s *Server) forkOne(ctx context.Context, snapID, tmpl string, d time.Duration, src boxView) forkResult {
	fail := func(err error) forkResult {
		st := statusOf(err)
		return forkResult{Error: &apiError{Code: st, Message: err.Error()}}
	}
	if !s.reserve() {
		return fail(errorf(http.StatusTooManyRequests, "the server runs %d sandboxes already (its limit)", s.opts.MaxSandboxes))
	}
	defer s.unreserve()
	release, err := s.acquireProvision(ctx)
	if err != nil {
		return fail(err)
	}
	info, err := s.b.Fork(ctx, snapID, sandbox.ForkOverrides{})
	release()
	if err != nil {
		return fail(err)
	}
	s.adopt(info.ID, d, func(b *box) {
		b.onTimeout, b.pauseFiles, b.autoResume = src.onTimeout, src.pauseFiles, src.autoResume
		b.allowInternet, b.network, b.ports = src.allowInternet, src.network, src.ports
	})
	s.log.Info("sandbox forked", "id", info.ID, "snapshot", snapID)
	resp := s.sandboxResponse(info.ID, tmpl)
	return forkResult{Sandbox: &resp}
}

// handleDeleteSnapshot serves DELETE /templates/{templateID} for a
// snapshot taken through this server (the SDKs' deleteSnapshot), named
// by its id or a name: its files are removed and it is no longer listed
// (204); sandboxes forked from it are independent of it and keep
// running. 404 for a snapshot the server does not know; a template (a
// policy file) is not deleted through the API (501).
func (s *Server) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("templateID")
	s.mu.Lock()
	i := slices.IndexFunc(s.snapshots, func(rec *snapRecord) bool { return rec.id == ref })
	if i < 0 {
		for j, rec := range slices.Backward(s.snapshots) {
			if slices.Contains(rec.names, ref) {
				i = j
				break
			}
		}
	}
	var rec *snapRecord
	if i >= 0 {
		rec = s.snapshots[i]
		s.snapshots = slices.Delete(s.snapshots, i, i+1)
	}
	s.mu.Unlock()
	if rec == nil {
		if _, isTemplate, _ := s.templateSpec(ref); isTemplate {
			s.writeError(w, r, notImplemented("deleting template "+ref+" (templates are policy files in the templates directory)"))
			return
		}
		s.writeError(w, r, errorf(http.StatusNotFound, "snapshot %q not found", ref))
		return
	}
	if err := removeSnapshotDir(rec); err != nil {
		s.mu.Lock()
		s.snapshots = append(s.snapshots, rec) // still there: still listed
		s.mu.Unlock()
		s.writeError(w, r, err)
		return
	}
	s.log.Info("snapshot deleted", "snapshot", rec.id)
	w.WriteHeader(http.StatusNoContent)
}

// removeSnapshotDir removes a snapshot's directory: the one the backend
// gave when it was taken, which must be an absolute path named after
// the snapshot and a directory (never a symlink).
func removeSnapshotDir(rec *snapRecord) error {
	if rec.dir == "" {
		return notImplemented("deleting a snapshot of this backend (it does not say where its snapshots are)")
	}
	if !filepath.IsAbs(rec.dir) || filepath.Base(rec.dir) != rec.id {
		return fmt.Errorf("snapshot %s: its directory %q is not named after it: refusing to remove it", rec.id, rec.dir)
	}
	fi, err := os.Lstat(rec.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // removed already (tent snapshot rm)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("snapshot %s: %s is not a directory: refusing to remove it", rec.id, rec.dir)
	}
	return os.RemoveAll(rec.dir)
}
