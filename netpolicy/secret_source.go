package netpolicy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// SecretSource holds the values of secrets by name. The proxy asks it
// each time a request to a secret's host goes out ([ProxyConfig.Secrets]),
// so that a value written to it (a rotation) is sent from the next
// request on, and a name it no longer has (a revocation) is sent no more:
// the request goes out with the placeholder as the sandbox wrote it, and
// a header transform's field is not set. Implementations must be safe
// for concurrent use; a value that fails [ValidateSecretValue] counts as
// none.
type SecretSource interface {
	LookupSecret(name string) (value string, ok bool)
}

// SecretMap is a [SecretSource] in memory. The zero value is empty and
// ready; it is safe for concurrent use.
type SecretMap struct {
	mu sync.RWMutex
	m  map[string]string
}

// Set gives secret name the value v, checked by [ValidateSecretValue].
func (m *SecretMap) Set(name, v string) error {
	if !validEnvName(name) {
		return fmt.Errorf("secret name %q: want a variable name such as GITHUB_TOKEN (letters, digits, _)", name)
	}
	if err := ValidateSecretValue(v); err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]string{}
	}
	m.m[name] = v
	return nil
}

// Delete removes secret name (revokes it); a name m lacks is no error.
func (m *SecretMap) Delete(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, name)
}

// LookupSecret returns the value of secret name.
func (m *SecretMap) LookupSecret(name string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[name]
	return v, ok
}

// maxFormsCache bounds the scrub forms a proxy keeps computed.
const maxFormsCache = 256

// formsKey names the forms of one secret carrying one value.
type formsKey struct{ name, placeholder, header, value, parts string }

// resolve returns pol's secrets as they are for one request: each with
// the value the source has for it now (none: revoked) and that value's
// forms. A secret whose value (or hosts) changed since the last request
// has its earlier value retired: its hosts may still echo it.
func (p *Proxy) resolve(pol *Compiled) []compiledSecret {
	if pol == nil || len(pol.secrets) == 0 {
		return nil
	}
	out := slices.Clone(pol.secrets)
	for i := range out {
		if out[i].Template != "" {
			if v, parts, err := FillTemplate(out[i].Template, p.src); err == nil {
				out[i].value, out[i].parts = v, parts
			}
		} else if v, ok := p.src.LookupSecret(out[i].Name); ok && ValidateSecretValue(v) == nil {
			out[i].value = v
		}
	}
	p.retiredMu.Lock()
	defer p.retiredMu.Unlock()
	for i := range out {
		s := &out[i]
		if s.value != "" {
			s.forms = p.formsLocked(s)
		}
		last, had := p.last[s.Name]
		if had && last.value == s.value && slices.Equal(last.Hosts, s.Hosts) && last.Placeholder == s.Placeholder {
			continue
		}
		if had {
			p.retireLocked(last)
			delete(p.last, s.Name)
		}
		if s.value != "" {
			p.last[s.Name] = *s
			p.unretireLocked(*s)
		}
	}
	return out
}

// formsLocked returns the forms of s with its value, computed once per
// value. p.retiredMu is held.
func (p *Proxy) formsLocked(s *compiledSecret) []scrubPair {
	k := formsKey{s.Name, s.Placeholder, s.Header, s.value, strings.Join(s.parts, "\x00")}
	if f, ok := p.forms[k]; ok {
		return f
	}
	if len(p.forms) >= maxFormsCache {
		clear(p.forms)
	}
	f := makeForms(&s.Secret, s.value, s.parts)
	p.forms[k] = f
	return f
}
