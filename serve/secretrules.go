package serve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// A change of a secret reaches the running sandboxes whose rules name
// it, as E2B resolves a secret when a request goes out: the secrets file also
// keeps those sandboxes' rules as they were given (with their
// placeholders), and an update, a destroy or a create of that name puts
// their header transforms in force again (Handle.SetNetworkPolicy).
// A destroyed secret's headers are no longer added (revoked: requests go
// out as the sandbox sent them); a secret that running sandboxes use
// cannot become shorter than minRuleSecret.

// minRuleSecret is the shortest secret a header transform may use: the
// proxy replaces the value in responses, and a shorter one would match
// ordinary text (netpolicy's own bound).
const minRuleSecret = 8

// secretRef is the placeholder Secret.fill makes.
var secretRef = regexp.MustCompile(`\$\{e2b\.secrets\.([^{}]*)\}`)

// fillSecrets returns nc with every ${e2b.secrets.NAME} in its header
// transforms replaced by the secret's value (nc itself is left as it
// is: it is what the server keeps, redacted), and the store's generation
// it was filled at (see recordRules). A name the store does not hold is
// a 400.
func (s *Server) fillSecrets(nc *networkConfig) (*networkConfig, uint64, error) {
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	if nc == nil || len(nc.Rules) == 0 {
		return nc, st.gen, nil
	}
	rules, err := st.fillLocked(nc.Rules, false)
	if err != nil {
		return nil, 0, err
	}
	c := *nc
	c.Rules = rules
	return &c, st.gen, nil
}

// fillLocked returns rules with their secrets' values in. A secret the
// store does not hold, or one too short for a rule, is a 400; with
// revoke, the header naming it is left out instead (and a rule left
// without headers).
func (st *secrets) fillLocked(rules map[string][]networkRule, revoke bool) (map[string][]networkRule, error) {
	out := make(map[string][]networkRule, len(rules))
	for h, rs := range rules {
		for i, rule := range rs {
			if rule.Transform != nil && len(rule.Transform.Headers) > 0 {
				hs := make(map[string]string, len(rule.Transform.Headers))
				for k, v := range rule.Transform.Headers {
					var missing, short string
					filled := secretRef.ReplaceAllStringFunc(v, func(ref string) string {
						name := secretRef.FindStringSubmatch(ref)[1]
						rec := st.namedLocked(name)
						if rec == nil || st.file == "" {
							missing = name
							return ref
						}
						if len(rec.Value) < minRuleSecret {
							short = name
						}
						return rec.Value
					})
					switch {
					case (missing != "" || short != "") && revoke:
						continue
					case missing != "":
						return nil, errorf(http.StatusBadRequest, "network.rules[%q][%d].transform.headers[%q]: secret %q not found (create it with Secret.create first)", h, i, k, missing)
					case short != "":
						return nil, errorf(http.StatusBadRequest, "network.rules[%q][%d].transform.headers[%q]: secret %q is shorter than %d bytes: too short for tent's proxy to keep it out of the answers the sandbox reads", h, i, k, short, minRuleSecret)
					}
					hs[k] = filled
				}
				if len(hs) == 0 {
					continue
				}
				rule = networkRule{Transform: &ruleTransform{Headers: hs}}
			}
			out[h] = append(out[h], rule)
		}
	}
	return out, nil
}

// secretNames returns the names of the secrets rules' header transforms
// name, nil without.
func secretNames(rules map[string][]networkRule) []string {
	var names []string
	for _, rs := range rules {
		for _, r := range rs {
			if r.Transform == nil {
				continue
			}
			for _, v := range r.Transform.Headers {
				for _, m := range secretRef.FindAllStringSubmatch(v, -1) {
					if !slices.Contains(names, m[1]) {
						names = append(names, m[1])
					}
				}
			}
		}
	}
	return names
}

// checkUsesLocked checks, before a create or an update is kept, that
// the rules of the running sandboxes using secret name can take its
// value as the store holds it now (see takeLocked).
func (st *secrets) checkUsesLocked(name string) error {
	for _, id := range st.usingLocked(name) {
		if err := st.takeLocked(st.rules[id]); err != nil {
			return errorf(http.StatusBadRequest, "value: secret %q is in the network rules of running sandbox %s, which cannot take this value: %v", name, id, err)
		}
	}
	return nil
}

// used reports whether kept rules name secret name.
func (st *secrets) used(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.usingLocked(name)) > 0
}

// takeLocked checks that rules can be put in force with the secrets as
// the store holds them now: each secret they name that the store has is
// long enough, and the headers are within bounds (a revoked secret's are
// left out, as applyRules does).
func (st *secrets) takeLocked(rules map[string][]networkRule) error {
	for _, name := range secretNames(rules) {
		if rec := st.namedLocked(name); rec != nil && len(rec.Value) < minRuleSecret {
			return errorf(http.StatusBadRequest, "secret %q is shorter than %d bytes: too short for tent's proxy to keep it out of the answers the sandbox reads", name, minRuleSecret)
		}
	}
	filled, _ := st.fillLocked(rules, true)
	_, err := ruleSecrets(filled)
	return err
}

// reconcileRules puts the kept rules of every sandbox in force again,
// when the server starts: a change of a secret that a crash cut short
// (the store changed, some sandboxes not) is finished.
func (s *Server) reconcileRules(timeout time.Duration) {
	st := s.secrets
	st.mu.Lock()
	ids := slices.Sorted(maps.Keys(st.rules))
	st.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := s.applyRules(ctx, id); err != nil {
			s.log.Error("putting a sandbox's rules in force again at start", "id", id, "err", err)
		}
		cancel()
	}
}

// pruneRules drops the rules kept for sandboxes not in live (the
// backend's, when the server starts: those ended while no server ran).
func (st *secrets) pruneRules(live map[string]bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.rules
	pruned := map[string]map[string][]networkRule{}
	for id, r := range old {
		if live[id] {
			pruned[id] = r
		}
	}
	if len(pruned) == len(old) {
		return nil
	}
	st.rules = pruned
	if err := st.saveLocked(); err != nil {
		st.rules = old
		return err
	}
	return nil
}

// usingLocked returns the sandboxes whose rules name secret name.
func (st *secrets) usingLocked(name string) []string {
	var ids []string
	for id, rules := range st.rules {
		if slices.Contains(secretNames(rules), name) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// recordRules keeps sandbox id's rules, as given, when they name a
// secret (and forgets them otherwise), so that a change of the secret
// reaches the sandbox. gen is the store's generation the sandbox's
// policy was filled at: changed reports that a secret changed since, and
// the caller puts the rules in force again (applyRules: a create or an
// update racing a secret's change).
func (s *Server) recordRules(id string, rules map[string][]networkRule, gen uint64) (changed bool, err error) {
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	uses := len(secretNames(rules)) > 0
	old, had := st.rules[id]
	if !uses && !had {
		return false, nil
	}
	if !uses {
		delete(st.rules, id)
	} else {
		if st.rules == nil {
			st.rules = map[string]map[string][]networkRule{}
		}
		st.rules[id] = rules
	}
	if err := st.saveLocked(); err != nil {
		if had {
			st.rules[id] = old
		} else {
			delete(st.rules, id)
		}
		return false, fmt.Errorf("sandbox %s: keeping its network rules for its secrets' changes: %w", id, err)
	}
	return uses && st.gen != gen, nil
}

// rulesOf returns the rules kept for sandbox id, nil without.
func (st *secrets) rulesOf(id string) map[string][]networkRule {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rules[id]
}

// forgetRules drops sandbox id's rules (it is gone).
func (s *Server) forgetRules(id string) {
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	rules, ok := st.rules[id]
	if !ok {
		return
	}
	delete(st.rules, id)
	if err := st.saveLocked(); err != nil {
		st.rules[id] = rules
		s.log.Warn("forgetting a sandbox's network rules", "id", id, "err", err)
	}
}

// refreshRulesFor is refreshRules for request r's change, on a context
// of its own: a client that goes away must not leave the change half
// made (the store changed, the sandboxes not).
func (s *Server) refreshRulesFor(r *http.Request, name string) error {
	ctx, cancel := s.detached(r)
	defer cancel()
	return s.refreshRules(ctx, name)
}

// refreshRules puts the header transforms of the running sandboxes that
// use secret name in force again, after a change of it. A sandbox that
// could not be reached, though it runs, is an error naming it: it may
// still add the old value.
func (s *Server) refreshRules(ctx context.Context, name string) error {
	st := s.secrets
	st.mu.Lock()
	ids := st.usingLocked(name)
	st.mu.Unlock()
	var failed []string
	var first error
	for _, id := range ids {
		if err := s.applyRules(ctx, id); err != nil {
			s.log.Error("a secret's change did not reach a sandbox using it", "secret", name, "id", id, "err", err)
			failed = append(failed, id)
			if first == nil {
				first = err
			}
		}
	}
	if len(failed) > 0 {
		// The change is made: a 500, whatever the sandboxes answered.
		return errorf(http.StatusInternalServerError, "secret %q changed, but sandboxes %s using it kept their previous header transforms (kill them to be sure): %v", name, strings.Join(failed, ", "), first)
	}
	if len(ids) > 0 {
		s.log.Info("a secret's change reached the sandboxes using it", "secret", name, "sandboxes", ids)
	}
	return nil
}

// applyRules gives sandbox id the header transforms of its recorded
// rules with the secrets' values as they are now: a revoked secret's
// headers are left out.
func (s *Server) applyRules(ctx context.Context, id string) error {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	return s.applyRulesLocked(ctx, id)
}

// take is takeLocked for a caller not holding st.mu.
func (st *secrets) take(rules map[string][]networkRule) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.takeLocked(rules)
}

// applyChanged is applyRules for a sandbox whose rules were filled
// before a secret they name changed (a create racing it): the secrets as
// they are now must suit them (a value made too short meanwhile would
// otherwise be left out silently).
func (s *Server) applyChanged(ctx context.Context, id string) error {
	if err := s.secrets.take(s.secrets.rulesOf(id)); err != nil {
		return err
	}
	return s.applyRules(ctx, id)
}

// applyRulesLocked is applyRules for a caller holding s.netMu.
func (s *Server) applyRulesLocked(ctx context.Context, id string) error {
	st := s.secrets
	st.mu.Lock()
	rules, ok := st.rules[id]
	var filled map[string][]networkRule
	if ok {
		filled, _ = st.fillLocked(rules, true)
	}
	st.mu.Unlock()
	if !ok {
		return nil
	}
	headers, err := ruleSecrets(filled)
	if err != nil {
		return err
	}
	h := handle.Open(ctx, s.b, id)
	info, err := h.Info(ctx)
	if errors.Is(err, sandbox.ErrNotFound) {
		s.forgetRules(id)
		return nil
	}
	if err != nil {
		return err
	}
	p := info.Spec.Network
	p.Secrets = headers // a record's secrets have no values; the backend keeps variables
	err = h.SetNetworkPolicy(ctx, p)
	if err != nil {
		// Ended meanwhile (a kill racing the change): nothing to reach.
		if _, ierr := h.Info(ctx); errors.Is(ierr, sandbox.ErrNotFound) {
			s.forgetRules(id)
			return nil
		}
	}
	return err
}
