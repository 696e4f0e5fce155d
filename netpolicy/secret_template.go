package netpolicy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A header transform may name its value instead of carrying it:
// [Secret.Template] is the field's text with "${NAME}" where the value of
// the stored secret NAME goes (E2B's "Bearer ${e2b.secrets.gh}"). The
// proxy asks its [SecretSource] for each NAME when a request goes out, so
// a write of NAME (a rotation) or its removal (a revocation: the field is
// not set) reaches every sandbox whose template names it from its next
// request on, and the answer is scrubbed of the text it sent and of each
// value in it.

// templateRef is one "${NAME}" of a template: NAME is a store's name
// (letters, digits, '_', '.', '-').
var templateRef = regexp.MustCompile(`\$\{([A-Za-z0-9_.-]{1,128})\}`)

// TemplateRef returns the text that names stored secret name in a
// [Secret.Template].
func TemplateRef(name string) string { return "${" + name + "}" }

// TemplateNames returns the names of the stored secrets template names,
// in order, each once.
func TemplateNames(template string) []string {
	var names []string
	for _, m := range templateRef.FindAllStringSubmatch(template, -1) {
		if !containsString(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkTemplate validates s's template: a header transform's, naming at
// least one stored secret, with no value beside it.
func checkTemplate(s Secret) error {
	switch {
	case s.Header == "":
		return errors.New("template: only a header transform (header) takes one")
	case s.Value != "":
		return errors.New("template: given beside a value (name the value in the template, or give the value alone)")
	case len(s.Template) > maxSecretLen:
		return fmt.Errorf("template: longer than %d bytes", maxSecretLen)
	case strings.ContainsAny(s.Template, "\r\n\x00"):
		return errors.New("template: holds CR, LF or NUL, which no header may carry")
	case len(TemplateNames(s.Template)) == 0:
		return errors.New("template: names no stored secret (want ${NAME} in it)")
	}
	return nil
}

// FillTemplate returns template with each ${NAME} replaced by src's value
// of NAME, and those values. A name src lacks (or whose value fails
// [ValidateSecretValue]) is an error naming it, as is a result no header
// transform may carry.
func FillTemplate(template string, src SecretSource) (string, []string, error) {
	var missing string
	var values []string
	out := templateRef.ReplaceAllStringFunc(template, func(ref string) string {
		name := templateRef.FindStringSubmatch(ref)[1]
		v, ok := src.LookupSecret(name)
		if !ok || ValidateSecretValue(v) != nil {
			if missing == "" {
				missing = name
			}
			return ref
		}
		if !containsString(values, v) {
			values = append(values, v)
		}
		return v
	})
	if missing != "" {
		return "", nil, fmt.Errorf("secret %s: none stored", missing)
	}
	if err := ValidateSecretValue(out); err != nil {
		return "", nil, fmt.Errorf("the header's value filled in: %w", err)
	}
	return out, values, nil
}
