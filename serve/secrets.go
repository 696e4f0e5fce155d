package serve

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
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
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// E2B's secrets: named values a sandbox never sees. Their values live in
// the backend's secret store (Options.Secrets), under storeName(NAME),
// where tent's proxy asks for them each time a request goes out: a
// create's network.rules header transform naming ${e2b.secrets.NAME}
// (the SDKs' Secret.fill) becomes a policy.NetworkSecret whose Template names
// that entry (see ruleSecrets), so an update or a destroy is one write of
// the store, in force from the next request of every sandbox naming the
// secret (running, forked or resumed). The server keeps only the index
// (Options.SecretsFile: ids, names, versions, metadata, never a value).
//
// The HTTP API is in secretsapi.go; the rules' checks, in secretrules.go.

// SecretStore is where E2B's secrets' values go: the store the
// backend's proxies ask (supervised.Backend.Secrets(), or the
// ProvisionOptions.Secrets of a Local backend). *secretstore.Store is
// one.
type SecretStore interface {
	// LookupSecret returns the value of secret name (netpolicy's
	// SecretSource, which the proxies ask).
	LookupSecret(name string) (value string, ok bool)
	Set(name, value string) error
	Delete(name string) (bool, error)
}

// storeName is the store's name of E2B secret name: E2B's names take
// characters a store's do not, and one prefix keeps them apart from the
// variables of tent's other frontends.
func storeName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "E2B_SECRET_" + hex.EncodeToString(sum[:16])
}

// secretRec is one secret as the index keeps it.
type secretRec struct {
	ID       string            `json:"secretID"`
	Name     string            `json:"name"`
	Version  int               `json:"currentVersion"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"createdAt"`
	Updated  time.Time         `json:"updatedAt"`
	// Short marks a value under 8 bytes, which no header transform may
	// carry (the proxy could not scrub it from answers): it is kept
	// nowhere, and a rule naming the secret is refused until an update.
	Short bool `json:"short,omitempty"`
	// Value is read only from the file of an earlier server, which kept
	// the values here (see loadSecrets); never written.
	Value string `json:"value,omitempty"`
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

// Bounds of the secrets.
const (
	maxSecretsStored = 1000
	maxSecretName    = 128
	maxSecretValue   = 16 << 10
	maxSecretsPage   = 100
)

// secrets is the index of E2B's secrets, their values in store.
type secrets struct {
	file  string      // Options.SecretsFile; "" when secrets are not served
	store SecretStore // the values
	mu    sync.Mutex
	list  []*secretRec // in creation order
}

// secretsFile is what the index file holds. An earlier server wrote the
// list alone (a JSON array), with values, and the rules of the sandboxes
// using them.
type secretsFile struct {
	Secrets []*secretRec    `json:"secrets"`
	Rules   json.RawMessage `json:"rules,omitempty"`
}

// loadSecrets reads the index file, if it exists. The file of an earlier
// server, which kept the values (and the rules of the sandboxes using
// them), is migrated once: its values go to store, and the file is
// written again without them (its rules are dropped: the proxy resolves
// the secrets of the sandboxes made from now on; those an earlier server
// made keep the values it gave them).
func loadSecrets(file string, store SecretStore) (*secrets, error) {
	s := &secrets{file: file, store: store}
	if file == "" {
		return s, nil
	}
	if store == nil {
		return nil, errors.New("secrets file given without a secret store (Options.Secrets)")
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
	var f secretsFile
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		err = json.Unmarshal(b, &f.Secrets)
	} else {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", file, err)
	}
	s.list = f.Secrets
	migrate := len(f.Rules) > 0
	for _, r := range s.list {
		if r.Value == "" {
			continue
		}
		migrate = true
		if err := s.setValue(r, r.Value); err != nil {
			return nil, fmt.Errorf("secrets file %s: moving secret %q to the store: %w", file, r.Name, err)
		}
		r.Value = ""
	}
	if migrate {
		if err := s.saveLocked(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// setValue writes v as r's value: to the store, or, under 8 bytes,
// nowhere (r is marked short, and any earlier value revoked).
func (st *secrets) setValue(r *secretRec, v string) error {
	if policy.ValidateSecretValue(v) != nil {
		r.Short = true
		_, err := st.store.Delete(storeName(r.Name))
		return err
	}
	r.Short = false
	return st.store.Set(storeName(r.Name), v)
}

// saveLocked writes the index whole, with atomicfile: a temporary file
// (mode 0600) beside it, synced, renamed over the old one.
func (st *secrets) saveLocked() error {
	b, err := json.Marshal(secretsFile{Secrets: st.list})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(st.file, b, 0o600, secretsTemps(st.file)); err != nil {
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
func (st *secrets) findLocked(ref string) (int, *secretRec) {
	for i, r := range st.list {
		if r.ID == ref || r.Name == ref {
			return i, r
		}
	}
	return -1, nil
}

// namedLocked returns the secret called name (a rule's
// ${e2b.secrets.NAME} names a secret by name only, never by id).
func (st *secrets) namedLocked(name string) *secretRec {
	for _, r := range st.list {
		if r.Name == name {
			return r
		}
	}
	return nil
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

// refLocked finds the secret ref names (an id or a name), or a 404.
func (st *secrets) refLocked(ref string) (int, *secretRec, error) {
	i, rec := st.findLocked(ref)
	if rec == nil {
		return -1, nil, errorf(http.StatusNotFound, "secret %q not found", ref)
	}
	return i, rec, nil
}

// create adds a secret; check refuses a value the sandboxes using its
// name cannot take.
func (st *secrets) create(req secretBody, check func(name, value string) error) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, old := st.findLocked(req.Name); old != nil {
		return secretInfo{}, errorf(http.StatusConflict, "a secret named %q exists already", req.Name)
	}
	if len(st.list) >= maxSecretsStored {
		return secretInfo{}, errorf(http.StatusConflict, "the server holds %d secrets already (its limit)", maxSecretsStored)
	}
	if err := check(req.Name, req.Value); err != nil {
		return secretInfo{}, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	now := time.Now().UTC()
	rec := &secretRec{ID: "sec_" + hex.EncodeToString(b[:]), Name: req.Name, Version: 1, Metadata: req.Metadata, Created: now, Updated: now}
	st.list = append(st.list, rec)
	if err := st.saveLocked(); err != nil {
		st.list = st.list[:len(st.list)-1]
		return secretInfo{}, err
	}
	// Kept in the index first: a value never stays in the store without it.
	if err := st.setValue(rec, req.Value); err != nil {
		st.list = st.list[:len(st.list)-1]
		_ = st.saveLocked()
		return secretInfo{}, fmt.Errorf("storing secret %q: %w", rec.Name, err)
	}
	if rec.Short {
		if err := st.saveLocked(); err != nil {
			return secretInfo{}, err
		}
	}
	return rec.info(), nil
}

// update gives secret ref (an id or a name) a new value, in force from
// the next request of every sandbox naming it.
func (st *secrets) update(ref string, req secretBody, check func(name, value string) error) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, rec, err := st.refLocked(ref)
	if err != nil {
		return secretInfo{}, err
	}
	if err := check(rec.Name, req.Value); err != nil {
		return secretInfo{}, err
	}
	old := *rec
	if err := st.setValue(rec, req.Value); err != nil {
		*rec = old
		return secretInfo{}, fmt.Errorf("storing secret %q: %w", rec.Name, err)
	}
	rec.Version, rec.Updated = rec.Version+1, time.Now().UTC()
	if req.Metadata != nil {
		rec.Metadata = req.Metadata
	}
	if err := st.saveLocked(); err != nil {
		return secretInfo{}, err // the value is in force: the index lags a version
	}
	return rec.info(), nil
}

// destroy removes secret ref (an id or a name): its value leaves the
// store, revoked from the next request on.
func (st *secrets) destroy(ref string) (secretInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	i, rec, err := st.refLocked(ref)
	if err != nil {
		return secretInfo{}, err
	}
	if _, err := st.store.Delete(storeName(rec.Name)); err != nil {
		return secretInfo{}, fmt.Errorf("revoking secret %q: %w", rec.Name, err)
	}
	list := st.list
	st.list = append(append([]*secretRec{}, list[:i]...), list[i+1:]...)
	if err := st.saveLocked(); err != nil {
		st.list = list
		return secretInfo{}, err // revoked all the same; a DELETE again finishes it
	}
	return rec.info(), nil
}
