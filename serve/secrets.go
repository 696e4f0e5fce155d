package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/tent-sandbox/tent/internal/atomicfile"
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
// The HTTP API is in secretsapi.go; the rules that a change of a secret
// reaches, in secretrules.go.

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
