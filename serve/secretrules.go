package serve

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// A header transform naming ${e2b.secrets.NAME} becomes a
// policy.NetworkSecret whose Template names the store's entry of NAME
// (ruleTemplate): the proxy fills it when each request goes out, as E2B
// resolves a secret then. Nothing here pushes a value anywhere: the
// checks below only refuse, up front, what the proxy could not send.

// minRuleSecret is the shortest secret a header transform may use: the
// proxy replaces the value in responses, and a shorter one would match
// ordinary text (netpolicy's own bound).
const minRuleSecret = 8

// secretRef is the placeholder Secret.fill makes.
var secretRef = regexp.MustCompile(`\$\{e2b\.secrets\.([^{}]*)\}`)

// ruleTemplate returns header value v as a proxy's secret template, each
// ${e2b.secrets.NAME} naming the store's entry of NAME; ok is false when
// v names no secret (a value given as it is). Text around the references
// may not hold "${": it would name other entries of the store.
func ruleTemplate(v string) (tmpl string, ok bool, err error) {
	ms := secretRef.FindAllStringSubmatchIndex(v, -1)
	if len(ms) == 0 {
		return "", false, nil
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(v[last:m[0]])
		b.WriteString(policy.SecretRef(storeName(v[m[2]:m[3]])))
		last = m[1]
	}
	b.WriteString(v[last:])
	if lit := secretRef.ReplaceAllString(v, ""); strings.Contains(lit, "${") {
		return "", false, fmt.Errorf(`"${" outside a secret's reference ${e2b.secrets.NAME}`)
	}
	return b.String(), true, nil
}

// checkRuleSecrets refuses nc's header transforms when one names a
// secret the server does not hold, one too short for a rule, or when
// the header filled in now would be one the proxy cannot send (400,
// naming the field).
func (s *Server) checkRuleSecrets(nc *networkConfig) error {
	if nc == nil {
		return nil
	}
	st := s.secrets
	st.mu.Lock()
	defer st.mu.Unlock()
	for h, rs := range nc.Rules {
		for i, rule := range rs {
			if rule.Transform == nil {
				continue
			}
			for k, v := range rule.Transform.Headers {
				field := fmt.Sprintf("network.rules[%q][%d].transform.headers[%q]", h, i, k)
				for _, m := range secretRef.FindAllStringSubmatch(v, -1) {
					switch rec := st.namedLocked(m[1]); {
					case rec == nil || st.file == "":
						return errorf(http.StatusBadRequest, "%s: secret %q not found (create it with Secret.create first)", field, m[1])
					case rec.Short:
						return errorf(http.StatusBadRequest, "%s: secret %q is shorter than %d bytes: too short for tent's proxy to keep it out of the answers the sandbox reads", field, m[1], minRuleSecret)
					}
				}
				tmpl, ok, err := ruleTemplate(v)
				if err == nil && ok {
					_, _, err = policy.FillSecretTemplate(tmpl, st.store)
				}
				if err != nil {
					return errorf(http.StatusBadRequest, "%s: %v", field, err)
				}
			}
		}
	}
	return nil
}

// checkSecretUses refuses value for secret name when a sandbox whose
// rules name it could not send it: too short, or a header too long with
// it. A secret revoked beside it does not stand in the way.
func (s *Server) checkSecretUses(ctx context.Context, name, value string) error {
	ref := policy.SecretRef(storeName(name))
	infos, err := s.b.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the sandboxes that may use secret %q: %w", name, err)
	}
	slices.SortFunc(infos, func(a, b sandbox.Info) int { return strings.Compare(a.ID, b.ID) })
	src := &policy.SecretMap{}
	for _, info := range infos {
		for _, sec := range info.Spec.Network.Secrets {
			if !strings.Contains(sec.Template, ref) {
				continue
			}
			var err error
			if len(value) < minRuleSecret {
				err = fmt.Errorf("secret %q is shorter than %d bytes: too short for tent's proxy to keep it out of the answers the sandbox reads", name, minRuleSecret)
			} else {
				err = fillWith(sec.Template, storeName(name), value, s.secrets.store, src)
			}
			if err != nil {
				return errorf(http.StatusBadRequest, "value: secret %q is in the network rules of running sandbox %s, which cannot take this value: %v", name, info.ID, err)
			}
		}
	}
	return nil
}

// fillWith fills template with value as entry name's and the store's
// other values, leaving out those store lacks (revoked).
func fillWith(template, name, value string, store SecretStore, src *policy.SecretMap) error {
	if err := src.Set(name, value); err != nil {
		return err
	}
	for _, n := range policy.SecretRefs(template) {
		if n == name {
			continue
		}
		if v, ok := store.LookupSecret(n); ok && src.Set(n, v) == nil {
			continue
		}
		template = strings.ReplaceAll(template, policy.SecretRef(n), "")
	}
	_, _, err := policy.FillSecretTemplate(template, src)
	return err
}
