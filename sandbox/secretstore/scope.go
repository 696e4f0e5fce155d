package secretstore

import (
	"maps"
	"strings"

	"github.com/tent-sandbox/tent/netpolicy"
)

// A scope keeps values given for one sandbox alone (E2B's header
// transforms, each sandbox's own, under names such as E2B_RULE_1 that
// every sandbox uses) apart from the shared ones: a scoped value is
// stored as "SCOPE.NAME", and the sandbox's proxy asks for it before
// NAME. The backend gives a sandbox's id as its scope, copies the scope
// to a fork and deletes it with the sandbox.

// ScopedName is the name secret name has in scope.
func ScopedName(scope, name string) string { return scope + "." + name }

// Scoped returns the source a proxy of scope asks: a secret's value in
// scope, else the shared one.
func (s *Store) Scoped(scope string) netpolicy.SecretSource { return scoped{s, scope} }

type scoped struct {
	s     *Store
	scope string
}

func (c scoped) LookupSecret(name string) (string, bool) {
	m, err := c.s.read()
	if err != nil {
		return "", false
	}
	if v, ok := m[ScopedName(c.scope, name)]; ok {
		return v, true
	}
	v, ok := m[name]
	return v, ok
}

// CopyScope gives scope to every value of scope from (a fork names the
// secrets its snapshot's sandbox named, with their values).
func (s *Store) CopyScope(from, to string) error {
	if !s.hasScope(from) {
		return nil
	}
	return s.update(func(m map[string]string) (bool, error) {
		add := map[string]string{}
		for k, v := range m {
			if name, ok := strings.CutPrefix(k, from+"."); ok && m[ScopedName(to, name)] != v {
				add[ScopedName(to, name)] = v
			}
		}
		if len(m)+len(add) > MaxEntries {
			return false, ErrFull
		}
		maps.Copy(m, add)
		return len(add) > 0, nil
	})
}

// DeleteScope removes every value of scope (its sandbox is gone).
func (s *Store) DeleteScope(scope string) error {
	if !s.hasScope(scope) {
		return nil // nothing to lock or write
	}
	return s.update(func(m map[string]string) (bool, error) {
		n := len(m)
		maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasPrefix(k, scope+".") })
		return len(m) != n, nil
	})
}

// hasScope reports whether the store holds a value of scope (or cannot
// tell).
func (s *Store) hasScope(scope string) bool {
	m, err := s.read()
	if err != nil {
		return true
	}
	for k := range m {
		if strings.HasPrefix(k, scope+".") {
			return true
		}
	}
	return false
}
