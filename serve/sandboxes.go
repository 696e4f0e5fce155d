package serve

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// clientID is what the server reports as E2B's (deprecated) client id.
const clientID = "tent"

// handleCreate serves POST /v2/sandboxes (and the older POST /sandboxes):
// a sandbox from a template (a policy file) or from a snapshot, with the
// request's metadata (as labels), environment, network and timeout.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req newSandboxRequest
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	plan, err := s.planCreate(req, s.b.Capabilities())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !s.reserve() {
		s.writeError(w, r, errorf(http.StatusTooManyRequests, "the server runs %d sandboxes already (its limit)", s.opts.MaxSandboxes))
		return
	}
	defer s.unreserve()
	ctx, cancel := s.detached(r)
	defer cancel()
	info, err := s.provisionPlan(ctx, plan)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("sandbox created", "id", info.ID, "template", plan.template, "timeout", plan.timeout, "network", info.Spec.Network.Mode.Normalize())
	s.adopt(info.ID, plan.timeout, func(b *box) {
		b.onTimeout, b.pauseFiles, b.autoResume = plan.onTimeout, plan.pauseFiles, plan.autoResume
		b.allowInternet, b.network, b.ports = plan.allowInternet, redactRules(plan.network), plan.ports
	})
	resp := s.sandboxResponse(info.ID, plan.template)
	resp.AllowInternetAccess = internetView(info.Spec.Network, plan.allowInternet)
	resp.Network = networkView(info.Spec.Network, redactRules(plan.network))
	writeJSON(w, http.StatusCreated, resp)
}

// provisionPlan provisions a sandbox from a template, or forks one from
// the snapshot the template id names.
func (s *Server) provisionPlan(ctx context.Context, plan createPlan) (info sandbox.Info, err error) {
	spec, found, err := s.templateSpec(plan.template)
	if err != nil {
		return sandbox.Info{}, err
	}
	caps := s.b.Capabilities()
	network, gen, err := s.fillSecrets(plan.network)
	if err != nil {
		return sandbox.Info{}, err
	}
	if plan.network != nil && len(secretNames(plan.network.Rules)) > 0 {
		// Its rules are kept for their secrets' changes once it runs.
		// A sandbox whose secrets could not be revoked later is not
		// left running.
		defer func() {
			if err == nil {
				var changed bool
				if changed, err = s.recordRules(info.ID, plan.network.Rules, gen); err == nil && changed {
					err = s.applyChanged(ctx, info.ID)
				}
				if err != nil {
					if kerr := s.kill(ctx, info.ID); kerr != nil {
						s.log.Error("killing a sandbox whose rules could not be kept", "id", info.ID, "err", kerr)
					}
					info = sandbox.Info{}
				}
			}
		}()
	}
	if !found && len(plan.volumes) > 0 {
		return sandbox.Info{}, errorf(http.StatusBadRequest, "volumeMounts: a sandbox made from a snapshot (template %q) keeps the snapshot's mounts", plan.template)
	}
	release, err := s.acquireProvision(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	defer release()
	vmounts, err := s.mountVolumes(plan.volumes)
	if err != nil {
		return sandbox.Info{}, err
	}
	if !found {
		snap := s.snapshotID(plan.template)
		ov := sandbox.ForkOverrides{Env: plan.env, Labels: plan.labels()}
		if plan.allowInternet != nil || plan.network != nil {
			p, err := networkPolicy(sandbox.NetworkPolicy{}, plan.allowInternet, network, false, caps.NetworkPolicy)
			if err != nil {
				return sandbox.Info{}, err
			}
			ov.Network = &p
		}
		info, err := s.b.Fork(ctx, snap, ov)
		if errors.Is(err, sandbox.ErrNotFound) {
			return sandbox.Info{}, errorf(http.StatusNotFound, "template %q not found: no template file in the templates directory and no snapshot of that id or name", plan.template)
		}
		return info, err
	}
	if spec.Network, err = networkPolicy(spec.Network, plan.allowInternet, network, false, caps.NetworkPolicy); err != nil {
		return sandbox.Info{}, err
	}
	spec.Env = append(spec.Env, plan.env...)
	spec.Mounts = append(slices.Clip(spec.Mounts), vmounts...)
	spec.Labels = plan.labels()
	if spec.Tier == sandbox.TierReduced {
		return s.b.Provision(ctx, spec)
	}
	// E2B's root filesystem is writable: new files and directories at /
	// go to the sandbox's own root tmpfs (the host's system directories
	// stay read-only), unless the template brings its own root. And E2B's
	// user has passwordless sudo: tent's runs commands as root of a
	// nested user namespace (sandbox.Spec.Sudo), nothing more.
	tmpl := spec
	spec.WritableRoot, spec.Sudo = spec.Root == nil, spec.Root == nil && sudoFits(spec)
	if spec.User != nil {
		info, err := s.b.Provision(ctx, spec)
		if errors.Is(err, sandbox.ErrUnsupported) && (spec.WritableRoot || spec.Sudo) {
			// No mount namespace here (the reduced tier): the template's
			// sandbox as it is, its root the host's.
			if info, err2 := s.b.Provision(ctx, tmpl); err2 == nil {
				s.log.Warn("this host cannot give sandboxes a writable root of their own nor sudo", "id", info.ID, "err", err)
				return info, nil
			}
		}
		return info, err
	}
	// E2B's user, unless the template names one. It is mapped in a user
	// namespace, so the full tier is asked for: the reduced tier would
	// run a root caller's sandbox as host uid 1000, someone's.
	spec.User = &sandbox.User{UID: e2bUID, GID: e2bUID, Name: e2bUser}
	spec.Tier = sandbox.TierFull
	if spec.Workdir == "" {
		spec.Workdir = e2bHome
	}
	// Root's home, for commands and files of E2B's user "root" (see
	// package envd): a writable tmpfs, unless the template mounts
	// something there.
	if spec.Root == nil && !mountsAt(spec, rootHome) {
		spec.Tmpfs = append(slices.Clip(spec.Tmpfs), rootHome)
	}
	info, err = s.b.Provision(ctx, spec)
	if errors.Is(err, sandbox.ErrUnsupported) {
		// No user namespaces here: the template's sandbox as it is, as
		// the server's user (or, for root, tent's unprivileged id).
		if info, err2 := s.b.Provision(ctx, tmpl); err2 == nil {
			s.log.Warn("this host cannot give sandboxes E2B's user (uid 1000, /home/user), a writable root nor sudo: the sandbox runs as tent's default identity, its root read-only", "id", info.ID, "err", err)
			return info, nil
		}
	}
	return info, err
}

// mountsAt reports whether spec mounts something at target or above it.
func mountsAt(spec sandbox.Spec, target string) bool {
	under := func(t string) bool { return t == target || t == "/" || strings.HasPrefix(target, t+"/") }
	for _, m := range spec.Mounts {
		if under(m.Target) {
			return true
		}
	}
	return slices.ContainsFunc(spec.Tmpfs, under)
}

// sudoFits reports whether spec leaves room for sandbox.Spec.Sudo's own
// mounts (/run/tent, and a union at /usr/local/bin): a template that
// mounts there keeps its mounts and gets no sudo.
func sudoFits(spec sandbox.Spec) bool {
	if mountsAt(spec, "/run/tent") || mountsAt(spec, "/usr/local/bin") {
		return false
	}
	beneath := func(t string) bool { return strings.HasPrefix(t, "/run/tent/") }
	return !slices.ContainsFunc(spec.Tmpfs, beneath) && !slices.ContainsFunc(spec.Mounts, func(m sandbox.Mount) bool { return beneath(m.Target) })
}

// rootHome is the home of E2B's user "root".
const rootHome = "/root"

// E2B's sandbox user: what the server's sandboxes run as unless their
// template names a user.
const (
	e2bUser = "user"
	e2bUID  = 1000
	e2bHome = "/home/" + e2bUser
)

// reserve counts a sandbox about to be created against MaxSandboxes.
func (s *Server) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.pending
	for _, b := range s.boxes {
		if b.created {
			n++
		}
	}
	if n >= s.opts.MaxSandboxes {
		return false
	}
	s.pending++
	return true
}

func (s *Server) unreserve() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// adopt records a sandbox the server created (or resumed, or forked)
// and arms its timeout; set, when not nil, sets more
// of its settings under the lock.
func (s *Server) adopt(id string, timeout time.Duration, set func(*box)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxLocked(id)
	b.created = true
	if set != nil {
		set(b)
	}
	if s.closed {
		return
	}
	s.armLocked(b, timeout)
}

// sandboxResponse is E2B's Sandbox: how the SDK reaches sandbox id.
func (s *Server) sandboxResponse(id, template string) sandboxResponse {
	return sandboxResponse{
		SandboxID:          id,
		TemplateID:         template,
		Alias:              template,
		ClientID:           clientID,
		EnvdVersion:        s.opts.EnvdVersion,
		EnvdAccessToken:    s.accessToken(id),
		TrafficAccessToken: s.trafficTokenFor(id),
		Domain:             s.domain(),
	}
}

// domain is what answers carry as the sandboxes' domain (nil: none).
func (s *Server) domain() *string {
	if s.opts.Domain == "" {
		return nil
	}
	d := s.opts.Domain
	return &d
}

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
// before). A paused sandbox keeps the new end until it is resumed.
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
	s.extend(w, r, req.Timeout, false)
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
	s.extend(w, r, req.Duration, true)
}

// extend sets (or, with onlyLonger, extends) a sandbox's timeout.
func (s *Server) extend(w http.ResponseWriter, r *http.Request, sec *int64, onlyLonger bool) {
	d, err := s.timeout(sec, "timeout")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.setEnd(info, d, onlyLonger)
	w.WriteHeader(http.StatusNoContent)
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
	s.armLocked(b, d)
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
	d, err := s.timeout(req.Timeout, "timeout")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
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

// handleNetwork serves PUT /sandboxes/{sandboxID}/network: the
// sandbox's allow rules are replaced (see networkPolicy for the mapping).
func (s *Server) handleNetwork(w http.ResponseWriter, r *http.Request) {
	var req networkConfig
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.netMu.Lock()
	defer s.netMu.Unlock()
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Rules) > 0 && s.pausesFilesOnly(info.ID) {
		// Its timeout's pause would be refused, as at create.
		s.writeError(w, r, errFilesPauseSecrets)
		return
	}
	filled, gen, err := s.fillSecrets(&req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cur := info.Spec.Network
	p, err := networkPolicy(cur, nil, filled, true, s.b.Capabilities().NetworkPolicy)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch cur.Mode.Normalize() {
	case p.Mode.Normalize():
	case netpolicy.None:
		if len(p.AllowedHosts) > 0 || len(p.Secrets) > 0 {
			s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s was created without network rules (no network at all), and tent picks the network mode at creation: create it with network rules (for example denyOut: [\"0.0.0.0/0\"]) to change them at run time", info.ID))
			return
		}
		// It has no network: denying everything changes nothing.
	default:
		s.writeError(w, r, errorf(http.StatusConflict, "sandbox %s runs with network mode %s, which cannot become %s at run time", info.ID, cur.Mode.Normalize(), p.Mode.Normalize()))
		return
	}
	// The rules are kept before they are in force, so that a secret's
	// change from then on reaches them; a refused change puts the
	// previous ones back.
	prev := s.secrets.rulesOf(info.ID)
	changed, err := s.recordRules(info.ID, req.Rules, gen)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if cur.Mode.Normalize() == netpolicy.Limited {
		// On a context of its own: a client gone must not leave the
		// rules kept and the sandbox's not in force.
		ctx, cancel := s.detached(r)
		defer cancel()
		if changed {
			// A secret changed since the fill: the rules must suit it
			// before anything is in force.
			err = s.secrets.take(req.Rules)
		}
		if err == nil {
			err = handle.Open(ctx, s.b, info.ID).SetNetworkPolicy(ctx, p)
		}
		if err == nil && changed {
			err = s.applyRulesLocked(ctx, info.ID)
		}
		if err != nil {
			if _, rerr := s.recordRules(info.ID, prev, 0); rerr != nil {
				s.log.Error("putting a sandbox's previous network rules back", "id", info.ID, "err", rerr)
			}
			s.writeError(w, r, err)
			return
		}
	}
	s.mu.Lock()
	b := s.boxLocked(info.ID)
	b.allowInternet, b.network = req.AllowInternetAccess, redactRules(&req)
	s.markDirtyLocked()
	s.mu.Unlock()
	s.log.Info("sandbox network rules replaced", "id", info.ID, "allowed", p.AllowedHosts)
	w.WriteHeader(http.StatusNoContent)
}
