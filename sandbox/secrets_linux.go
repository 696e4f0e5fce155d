package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/netpolicy"
)

// caTarget is where a sandbox whose proxy intercepts TLS finds the
// proxy's CA certificate (ca.pem) and the host's trust store with it
// (bundle.pem), read-only.
const caTarget = "/run/tent/ca"

// hostBundles are the host's CA bundles, the first that exists is used.
var hostBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// caEnv points the trust settings of common tools at the bundle (the
// host's roots and the proxy's CA), so that intercepted hosts verify and
// every other host still does: OpenSSL and curl, Python's requests, git;
// node adds NODE_EXTRA_CA_CERTS to its own roots.
func caEnv() []string {
	bundle, ca := caTarget+"/bundle.pem", caTarget+"/ca.pem"
	return []string{
		"SSL_CERT_FILE=" + bundle, "CURL_CA_BUNDLE=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle, "NODE_EXTRA_CA_CERTS=" + ca, "TENT_CA_CERT=" + ca,
	}
}

// secretsEnv gives each secret's variable its placeholder. A variable the
// spec also sets is an error: one of the two would be silently lost; so
// is one whose value holds a secret's value (the value never enters).
func secretsEnv(secrets []netpolicy.Secret, env []string) ([]string, error) {
	var out []string
	for _, s := range secrets {
		if s.Header != "" {
			continue // a header transform: nothing inside sends it
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			if k == s.Name {
				return nil, fmt.Errorf("env: %s is a secret of the network policy: its variable holds the placeholder, so the environment cannot set it too", s.Name)
			}
			if s.Value != "" && strings.Contains(v, s.Value) {
				return nil, fmt.Errorf("env: %s holds the value of secret %s, which never enters the sandbox (inside, %s holds its placeholder)", k, s.Name, s.Name)
			}
		}
		out = append(out, s.Name+"="+s.Placeholder)
	}
	return out, nil
}

// makeCADir writes the CA certificate and the bundle into p.caDir, a new
// directory only the host writes, readable by the sandbox's user.
func (p *plan) makeCADir() error {
	if p.caDir == "" {
		return nil
	}
	if err := os.Mkdir(p.caDir, 0o755); err != nil {
		return fmt.Errorf("proxy CA: %w", err)
	}
	if err := os.Chmod(p.caDir, 0o755); err != nil { // whatever the umask
		return fmt.Errorf("proxy CA: %w", err)
	}
	ca := p.ca.CertPEM()
	var bundle []byte
	for _, b := range hostBundles {
		if data, err := os.ReadFile(b); err == nil {
			bundle = append(bytes.TrimRight(data, "\n"), '\n')
			break
		}
	}
	bundle = append(bundle, ca...)
	for name, data := range map[string][]byte{"ca.pem": ca, "bundle.pem": bundle} {
		f, err := os.OpenFile(filepath.Join(p.caDir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("proxy CA: %w", err)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(f.Name(), 0o644)
		}
		if err != nil {
			return fmt.Errorf("proxy CA: %w", err)
		}
	}
	return nil
}

// removeCADir removes what makeCADir made.
func removeCADir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("proxy CA: %w", err)
	}
	return nil
}

// secretWriter is a SecretSource that values given inline are written to.
type secretWriter interface {
	Set(name, value string) error
}

// ownValues is the source of a sandbox given a store of values: the
// values of its header transforms given inline, then the store's. A
// header transform's value is the sandbox's own (E2B's rules: each
// sandbox has its own under names every sandbox uses), so it never goes
// to a store other sandboxes read; a variable's does (a rotation there
// reaches every sandbox naming it).
type ownValues struct {
	own  netpolicy.SecretMap
	next netpolicy.SecretSource
}

func (o *ownValues) LookupSecret(name string) (string, bool) {
	if v, ok := o.own.LookupSecret(name); ok {
		return v, true
	}
	return o.next.LookupSecret(name)
}

// inlineSecrets returns secrets without their inline values, written to
// src (a header transform's to its own values when src is an ownValues).
// Without a source the values stay (the proxy keeps them in memory), and
// every secret must have one.
func inlineSecrets(secrets []netpolicy.Secret, src netpolicy.SecretSource) ([]netpolicy.Secret, error) {
	if src == nil {
		for i, s := range secrets {
			if s.Value == "" {
				return nil, invalid(fmt.Errorf("network: secrets[%d] (%s) has no value: give it where the sandbox starts, or a store of values (ProvisionOptions.Secrets)", i, s.Name))
			}
		}
		return secrets, nil
	}
	out := slices.Clone(secrets)
	for i, s := range out {
		if s.Value == "" {
			continue
		}
		w, err := writerFor(src, s)
		if err != nil {
			return nil, err
		}
		if err := w.Set(s.Name, s.Value); err != nil {
			return nil, invalid(fmt.Errorf("network: %w", err))
		}
		out[i].Value = ""
	}
	return out, nil
}

// writerFor returns where s's inline value is written in src.
func writerFor(src netpolicy.SecretSource, s netpolicy.Secret) (secretWriter, error) {
	if o, ok := src.(*ownValues); ok {
		if s.Header != "" {
			return &o.own, nil
		}
		src = o.next
	}
	if w, ok := src.(secretWriter); ok {
		return w, nil
	}
	return nil, invalid(fmt.Errorf("network: secret %s: its value is given inline, and the sandbox's store of values cannot be written", s.Name))
}

// keepValuesOut checks, when the values of spec's secrets come from src,
// that the environment the spec sets holds none of them (as secretsEnv
// does for inline values), and drops from the commands' environment an
// inherited variable that holds one (the variable tent read it from).
func (p *plan) keepValuesOut(spec *Spec, src netpolicy.SecretSource) error {
	if src == nil {
		return nil
	}
	var values []string
	for _, s := range spec.Network.Secrets {
		v, ok := src.LookupSecret(s.Name)
		if !ok || v == "" {
			continue
		}
		for _, kv := range spec.Env {
			if k, ev, _ := strings.Cut(kv, "="); strings.Contains(ev, v) {
				return invalid(fmt.Errorf("env: %s holds the value of secret %s, which never enters the sandbox (inside, %s holds its placeholder)", k, s.Name, s.Name))
			}
		}
		values = append(values, v)
	}
	p.cfg.Exec.Env = withoutSecrets(p.cfg.Exec.Env, values)
	return nil
}
