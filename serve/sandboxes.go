package serve

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

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
	if err := s.checkRuleSecrets(plan.network); err != nil {
		return sandbox.Info{}, err
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
			p, err := networkPolicy(sandbox.NetworkPolicy{}, plan.allowInternet, plan.network, false, caps.NetworkPolicy)
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
	if spec.Network, err = networkPolicy(spec.Network, plan.allowInternet, plan.network, false, caps.NetworkPolicy); err != nil {
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
