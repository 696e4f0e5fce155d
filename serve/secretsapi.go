package serve

import (
	"net/http"
	"strconv"
)

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

// handleSecretCreate serves POST /secrets: {name, value, metadata}.
func (s *Server) handleSecretCreate(w http.ResponseWriter, r *http.Request) {
	req, err := s.readSecretBody(r, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.secrets.create(req, s.usesChecker(r))
	if err == nil {
		s.log.Info("secret created", "id", info.ID, "name", info.Name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
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
	info, err := s.secrets.update(r.PathValue("secretID"), req, s.usesChecker(r))
	if err == nil {
		s.log.Info("secret updated", "id", info.ID, "name", info.Name, "version", info.Version)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
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
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// usesChecker returns the check of a new value against the sandboxes
// whose rules name the secret (checkSecretUses), on r's context.
func (s *Server) usesChecker(r *http.Request) func(name, value string) error {
	return func(name, value string) error { return s.checkSecretUses(r.Context(), name, value) }
}
