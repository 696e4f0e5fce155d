package policy

import "github.com/tent-sandbox/tent/netpolicy"

// A header transform's [NetworkSecret] may carry a Template instead of a
// value: text naming stored secrets as ${NAME}, which the proxy fills
// from the backend's secret store each time a request goes out. These
// are netpolicy's template functions, for a frontend that writes such
// templates or checks them before a sandbox is made.

// SecretMap is a secret source in memory (netpolicy.SecretMap): a
// [FillSecretTemplate] source for values not stored yet. The zero value
// is empty and ready; it is safe for concurrent use.
type SecretMap = netpolicy.SecretMap

// SecretRef returns the text that names stored secret name in a
// template: "${name}".
func SecretRef(name string) string { return netpolicy.TemplateRef(name) }

// SecretRefs returns the names of the stored secrets template names, in
// order, each once.
func SecretRefs(template string) []string { return netpolicy.TemplateNames(template) }

// FillSecretTemplate returns template with each ${NAME} replaced by
// src's value of NAME, and those values, as the proxy fills it. A name
// src lacks (or whose value fails [ValidateSecretValue]) is an error
// naming it, as is a result no header may carry.
func FillSecretTemplate(template string, src netpolicy.SecretSource) (string, []string, error) {
	return netpolicy.FillTemplate(template, src)
}

// ValidateSecretValue checks a secret's value as the stores and the
// proxy do (netpolicy.ValidateSecretValue): 8 bytes to 16 KiB, without
// CR, LF or NUL.
func ValidateSecretValue(v string) error { return netpolicy.ValidateSecretValue(v) }
