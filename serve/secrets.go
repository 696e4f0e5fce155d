package serve

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// E2B's secrets: named values the server keeps and a sandbox never sees.
// A create's network.rules header transform names one as
// ${e2b.secrets.NAME} (the SDKs' Secret.fill); the server puts the value
// in when it gives the sandbox its policy, and tent's proxy adds it to
// the sandbox's HTTPS requests to that host (see secrets.md). Values are
// kept in Options.SecretsFile (mode 0600, written whole at each change,
// as the API key file is kept) and never answered, logged or saved in the
// state file; an update reaches the sandboxes created after it.

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
}

// loadSecrets reads file, if it exists.
func loadSecrets(file string) (*secrets, error) {
	s := &secrets{file: file}
	if file == "" {
		return s, nil
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if err := json.Unmarshal(b, &s.list); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", file, err)
	}
	return s, nil
}

// saveLocked writes the store whole: a temporary file (mode 0600)
// renamed over the old one.
func (s *secrets) saveLocked() error {
	b, err := json.Marshal(s.list)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.file), ".secrets-*")
	if err != nil {
		return fmt.Errorf("saving the secrets: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.file)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("saving the secrets: %w", err)
	}
	return nil
}

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

// refLocked finds the secret r's path names (by id or name), or a 404.
func (st *secrets) refLocked(r *http.Request) (int, *secretRec, error) {
	ref := r.PathValue("secretID")
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
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, old := st.findLocked(req.Name); old != nil {
		s.writeError(w, r, errorf(http.StatusConflict, "a secret named %q exists already", req.Name))
		return
	}
	if len(st.list) >= maxSecretsStored {
		s.writeError(w, r, errorf(http.StatusConflict, "the server holds %d secrets already (its limit)", maxSecretsStored))
		return
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	now := time.Now().UTC()
	rec := &secretRec{ID: "sec_" + hex.EncodeToString(b[:]), Name: req.Name, Value: req.Value, Version: 1, Metadata: req.Metadata, Created: now, Updated: now}
	st.list = append(st.list, rec)
	if err := st.saveLocked(); err != nil {
		st.list = st.list[:len(st.list)-1]
		s.writeError(w, r, err)
		return
	}
	s.log.Info("secret created", "id", rec.ID, "name", rec.Name)
	writeJSON(w, http.StatusCreated, rec.info())
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
	_, rec, err := st.refLocked(r)
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
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	_, rec, err := st.refLocked(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	old := *rec
	rec.Value, rec.Version, rec.Updated = req.Value, rec.Version+1, time.Now().UTC()
	if req.Metadata != nil {
		rec.Metadata = req.Metadata
	}
	if err := st.saveLocked(); err != nil {
		*rec = old
		s.writeError(w, r, err)
		return
	}
	s.log.Info("secret updated", "id", rec.ID, "name", rec.Name, "version", rec.Version)
	writeJSON(w, http.StatusOK, rec.info())
}

// handleSecretDestroy serves DELETE /secrets/{secretID}.
func (s *Server) handleSecretDestroy(w http.ResponseWriter, r *http.Request) {
	if err := s.servesSecrets(); err != nil {
		s.writeError(w, r, err)
		return
	}
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	i, rec, err := st.refLocked(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list := st.list
	st.list = append(append([]*secretRec{}, list[:i]...), list[i+1:]...)
	if err := st.saveLocked(); err != nil {
		st.list = list
		s.writeError(w, r, err)
		return
	}
	s.log.Info("secret destroyed", "id", rec.ID, "name", rec.Name)
	w.WriteHeader(http.StatusNoContent)
}

// minRuleSecret is the shortest secret a header transform may use: the
// proxy replaces the value in responses, and a shorter one would match
// ordinary text (netpolicy's own bound).
const minRuleSecret = 8

// secretRef is the placeholder Secret.fill makes.
var secretRef = regexp.MustCompile(`\$\{e2b\.secrets\.([^{}]*)\}`)

// fillSecrets returns nc with every ${e2b.secrets.NAME} in its header
// transforms replaced by the secret's value (nc itself is left as it
// is: it is what the server keeps, redacted). A name the store does not
// hold is a 400.
func (s *Server) fillSecrets(nc *networkConfig) (*networkConfig, error) {
	if nc == nil || len(nc.Rules) == 0 {
		return nc, nil
	}
	c := *nc
	c.Rules = make(map[string][]networkRule, len(nc.Rules))
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	for h, rs := range nc.Rules {
		for i, rule := range rs {
			if rule.Transform != nil && len(rule.Transform.Headers) > 0 {
				hs := make(map[string]string, len(rule.Transform.Headers))
				for k, v := range rule.Transform.Headers {
					var missing, short string
					hs[k] = secretRef.ReplaceAllStringFunc(v, func(ref string) string {
						name := secretRef.FindStringSubmatch(ref)[1]
						_, rec := st.findLocked(name)
						if rec == nil || st.file == "" {
							missing = name
							return ref
						}
						if len(rec.Value) < minRuleSecret {
							short = name
						}
						return rec.Value
					})
					if missing != "" {
						return nil, errorf(http.StatusBadRequest, "network.rules[%q][%d].transform.headers[%q]: secret %q not found (create it with Secret.create first)", h, i, k, missing)
					}
					if short != "" {
						return nil, errorf(http.StatusBadRequest, "network.rules[%q][%d].transform.headers[%q]: secret %q is shorter than %d bytes: too short for tent's proxy to keep it out of the answers the sandbox reads", h, i, k, short, minRuleSecret)
					}
				}
				rule = networkRule{Transform: &ruleTransform{Headers: hs}}
			}
			c.Rules[h] = append(c.Rules[h], rule)
		}
	}
	return &c, nil
}
