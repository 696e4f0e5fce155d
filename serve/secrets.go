package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// E2B's secrets: named values the server keeps and a sandbox never sees.
// A create's network.rules header transform names one as
// ${e2b.secrets.NAME} (the SDKs' Secret.fill); the server puts the value
// in when it gives the sandbox its policy, and tent's proxy adds it to
// the sandbox's HTTPS requests to that host (see secrets.md). Values are
// kept in Options.SecretsFile (mode 0600, written whole at each change,
// as the API key file is kept) and never answered, logged or saved in the
// state file.
//
// A change of a secret reaches the running sandboxes whose rules name
// it, as E2B resolves a secret when a request goes out: the file also
// keeps those sandboxes' rules as they were given (with their
// placeholders), and an update, a destroy or a create of that name puts
// their header transforms in force again (Handle.SetNetworkPolicy).
// A destroyed secret's headers are no longer added (revoked: requests go
// out as the sandbox sent them); a secret that running sandboxes use
// cannot become shorter than minRuleSecret.

// secretRec is one secret as the secrets file keeps it.
type secretRec struct {
	ID       string            `json:"secretID"`
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Version  int               `json:"currentVersion"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"createdAt"`
	Updated  time.Time         `json:"updatedAt"`
}

// secretInfo is SecretInfo: a secret without its value.
type secretInfo struct {
	ID       string            `json:"secretID"`
	Name     string            `json:"name"`
	Version  int               `json:"currentVersion"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"createdAt"`
	Updated  time.Time         `json:"updatedAt"`
}

func (r *secretRec) info() secretInfo {
	md := r.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secretInfo{ID: r.ID, Name: r.Name, Version: r.Version, Metadata: md, Created: r.Created, Updated: r.Updated}
}

// Bounds of the secret store.
const (
	maxSecretsStored = 1000
	maxSecretName    = 128
	maxSecretValue   = 16 << 10
	maxSecretsPage   = 100
)

// secrets is the server's secret store.
type secrets struct {
	file string // Options.SecretsFile; "" when secrets are not served
	mu   sync.Mutex
	list []*secretRec // in creation order
	gen  uint64       // counts the changes of secrets (see recordRules)
	// rules are the network rules, as given, of the sandboxes whose
	// header transforms name a secret, by sandbox id.
	rules map[string]map[string][]networkRule
}

// secretsFile is what the secrets file holds. An older server wrote the
// secrets' list alone (a JSON array), which loadSecrets still reads.
type secretsFile struct {
	Secrets []*secretRec                        `json:"secrets"`
	Rules   map[string]map[string][]networkRule `json:"rules,omitempty"`
}

// loadSecrets reads file, if it exists.
func loadSecrets(file string) (*secrets, error) {
	s := &secrets{file: file}
	if file == "" {
		return s, nil
	}
	// What a killed server left beside the file (never the file itself).
	cleanTemps(file, secretsTemps(file))
	if !legacySecretsTemps.Match(filepath.Base(file)) {
		cleanTemps(file, legacySecretsTemps)
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		err = json.Unmarshal(b, &s.list)
	} else {
		var f secretsFile
		err = json.Unmarshal(b, &f)
		s.list, s.rules = f.Secrets, f.Rules
	}
	if err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", file, err)
	}
	return s, nil
}

// saveLocked writes the store whole, with atomicfile: a temporary file
// (mode 0600) beside it, synced, renamed over the old one.
func (s *secrets) saveLocked() error {
	b, err := json.Marshal(secretsFile{Secrets: s.list, Rules: s.rules})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.file, b, 0o600, secretsTemps(s.file)); err != nil {
		return fmt.Errorf("saving the secrets: %w", err)
	}
	return nil
}

// secretsTemps names the temporaries the secrets file is written
// through: .NAME.tmp-HEX beside it.
func secretsTemps(file string) atomicfile.Options {
	return atomicfile.Options{Prefix: "." + filepath.Base(file) + ".tmp-"}
}

// legacySecretsTemps names an older server's temporaries (.secrets-DIGITS).
var legacySecretsTemps = atomicfile.Options{Prefix: ".secrets-"}

// findLocked returns the secret whose id or name is ref.
func (s *secrets) findLocked(ref string) (int, *secretRec) {
	for i, r := range s.list {
		if r.ID == ref || r.Name == ref {
			return i, r
		}
	}
	return -1, nil
}

// checkSecretName refuses what cannot go in ${e2b.secrets.NAME}.
func checkSecretName(name string) error {
	if name == "" || len(name) > maxSecretName || strings.ContainsAny(name, "{}") || strings.IndexFunc(name, unicode.IsControl) >= 0 || !printable(name) {
		return errorf(http.StatusBadRequest, "name %q: a secret name is 1 to %d characters, without '{', '}' or control characters", name, maxSecretName)
	}
	return nil
}

// checkSecretValue refuses a value no header could carry.
func checkSecretValue(v string) error {
	switch {
	case v == "":
		return errorf(http.StatusBadRequest, "value: empty")
	case len(v) > maxSecretValue:
		return errorf(http.StatusBadRequest, "value: over %d bytes", maxSecretValue)
	case strings.ContainsAny(v, "\r\n\x00"):
		return errorf(http.StatusBadRequest, "value: holds CR, LF or NUL, which no header may carry")
	}
	return nil
}

// secretRoutes adds the secrets API to m.
func (s *Server) secretRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /secrets", s.handleSecretCreate)
	m.HandleFunc("GET /secrets", s.handleSecretList)
	m.HandleFunc("GET /secrets/{secretID}", s.handleSecretGet)
	m.HandleFunc("POST /secrets/{secretID}", s.handleSecretUpdate)
	m.HandleFunc("DELETE /secrets/{secretID}", s.handleSecretDestroy)
}

// servesSecrets refuses when the server has no secrets file.
func (s *Server) servesSecrets() error {
	if s.secrets.file == "" {
		return notImplemented("secrets (this server has no secrets file)")
	}
	return nil
}

// secretBody is the body of a create or an update.
type secretBody struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// readSecretBody reads and checks a create's (named) or an update's body.
func (s *Server) readSecretBody(r *http.Request, named bool) (secretBody, error) {
	var req secretBody
	err := s.servesSecrets()
	if err == nil {
		err = readJSON(r, &req)
	}
	if err == nil && named {
		err = checkSecretName(req.Name)
	}
	if err == nil {
		err = checkSecretValue(req.Value)
	}
	if err == nil {
		_, err = checkMetadata(req.Metadata)
	}
	return req, err
}

// namedLocked returns the secret called name (a rule's
// ${e2b.secrets.NAME} names a secret by name only, never by id, so that
// the sandboxes using a secret are found by its name).
func (s *secrets) namedLocked(name string) *secretRec {
	for _, r := range s.list {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// refLocked finds the secret ref names (an id or a name), or a 404.
func (st *secrets) refLocked(ref string) (int, *secretRec, error) {
	i, rec := st.findLocked(ref)
	if rec == nil {
		return -1, nil, errorf(http.StatusNotFound, "secret %q not found", ref)
	}
	return i, rec, nil
}

// handleSecretCreate serves POST /secrets: {name, value, metadata}.
func (s *Server) handleSecretCreate(w http.ResponseWriter, r *http.Request) {
	req, err := s.readSecretBody(r, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.secrets.create(req)
	if err == nil {
		s.log.Info("secret created", "id", info.ID, "name", info.Name)
		err = s.refreshRulesFor(r, info.Name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

// create adds a secret.
func (st *secrets) create(req secretBody) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, old := st.findLocked(req.Name); old != nil {
		return secretInfo{}, errorf(http.StatusConflict, "a secret named %q exists already", req.Name)
	}
	if len(st.list) >= maxSecretsStored {
		return secretInfo{}, errorf(http.StatusConflict, "the server holds %d secrets already (its limit)", maxSecretsStored)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	now := time.Now().UTC()
	rec := &secretRec{ID: "sec_" + hex.EncodeToString(b[:]), Name: req.Name, Value: req.Value, Version: 1, Metadata: req.Metadata, Created: now, Updated: now}
	st.list = append(st.list, rec)
	if err := st.checkUsesLocked(rec.Name); err != nil {
		st.list = st.list[:len(st.list)-1]
		return secretInfo{}, err
	}
	if err := st.saveLocked(); err != nil {
		st.list = st.list[:len(st.list)-1]
		return secretInfo{}, err
	}
	st.gen++
	return rec.info(), nil
}

// handleSecretList serves GET /secrets?limit=N&nextToken=T, oldest
// first; x-next-token names the next page.
func (s *Server) handleSecretList(w http.ResponseWriter, r *http.Request) {
	if err := s.servesSecrets(); err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	limit, start := maxSecretsPage, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSecretsPage {
			s.writeError(w, r, errorf(http.StatusBadRequest, "limit %q: want 1 to %d", v, maxSecretsPage))
			return
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, "nextToken %q: not one this server gave", v))
			return
		}
		start = n
	}
	st := s.secrets
	st.mu.Lock()
	out := []secretInfo{}
	for i := start; i < len(st.list) && len(out) < limit; i++ {
		out = append(out, st.list[i].info())
	}
	if start+limit < len(st.list) {
		w.Header().Set("X-Next-Token", strconv.Itoa(start+limit))
	}
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// handleSecretGet serves GET /secrets/{secretID}: by id or by name.
func (s *Server) handleSecretGet(w http.ResponseWriter, r *http.Request) {
	if err := s.servesSecrets(); err != nil {
		s.writeError(w, r, err)
		return
	}
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	_, rec, err := st.refLocked(r.PathValue("secretID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec.info())
}

// handleSecretUpdate serves POST /secrets/{secretID}: a new value (a new
// version) and, when given, new metadata.
func (s *Server) handleSecretUpdate(w http.ResponseWriter, r *http.Request) {
	req, err := s.readSecretBody(r, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.secrets.update(r.PathValue("secretID"), req)
	if err == nil {
		s.log.Info("secret updated", "id", info.ID, "name", info.Name, "version", info.Version)
		err = s.refreshRulesFor(r, info.Name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// update gives secret ref (an id or a name) a new value.
func (st *secrets) update(ref string, req secretBody) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, rec, err := st.refLocked(ref)
	if err != nil {
		return secretInfo{}, err
	}
	old := *rec
	rec.Value = req.Value
	if err := st.checkUsesLocked(rec.Name); err != nil {
		*rec = old
		return secretInfo{}, err
	}
	rec.Version, rec.Updated = rec.Version+1, time.Now().UTC()
	if req.Metadata != nil {
		rec.Metadata = req.Metadata
	}
	if err := st.saveLocked(); err != nil {
		*rec = old
		return secretInfo{}, err
	}
	st.gen++
	return rec.info(), nil
}

// handleSecretDestroy serves DELETE /secrets/{secretID}.
func (s *Server) handleSecretDestroy(w http.ResponseWriter, r *http.Request) {
	err := s.servesSecrets()
	var info secretInfo
	if err == nil {
		info, err = s.secrets.destroy(r.PathValue("secretID"))
	}
	if err == nil {
		s.log.Info("secret destroyed", "id", info.ID, "name", info.Name)
		err = s.refreshRulesFor(r, info.Name)
	} else if he := (*httpError)(nil); errors.As(err, &he) && he.status == http.StatusNotFound {
		// Gone already, perhaps by a destroy whose revocation did not
		// reach every sandbox (a 500, a crash): this one pushes it again.
		name := r.PathValue("secretID")
		if s.secrets.used(name) {
			if rerr := s.refreshRulesFor(r, name); rerr != nil {
				err = rerr
			}
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// destroy removes secret ref (an id or a name).
func (st *secrets) destroy(ref string) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	i, rec, err := st.refLocked(ref)
	if err != nil {
		return secretInfo{}, err
	}
	list := st.list
	st.list = append(append([]*secretRec{}, list[:i]...), list[i+1:]...)
	if err := st.saveLocked(); err != nil {
		st.list = list
		return secretInfo{}, err
	}
	st.gen++
	return rec.info(), nil
}

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
