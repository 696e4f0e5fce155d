package netpolicy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Secret is a credential the sandbox may use without ever holding it. The
// sandbox's environment variable Name holds a placeholder, a random string
// unique to the sandbox; the proxy replaces the placeholder with the
// secret's value in the requests it sees to one of Hosts, and nowhere
// else. See "Secrets" in the package documentation.
//
// A Secret names a credential; its value lives in a [SecretSource] the
// proxy asks each time a request goes out ([ProxyConfig.Secrets]), so a
// rotation or a revocation is one write to the source. Value is input
// only, for callers without a source of their own: it never appears in
// JSON (nor does fmt or log/slog print it), a proxy without a source
// takes it as its in-memory value, and tent's backends write it to their
// store at the call that carries it. The placeholder is kept in JSON: it
// is no secret, and a sandbox resumed or forked from a record or a
// snapshot must see the same one.
type Secret struct {
	// Name is the variable inside the sandbox, a shell name such as
	// GITHUB_TOKEN.
	Name string `json:"name"`
	// Hosts are the host patterns (names and "*.example.com" wildcards of
	// [ParseRule], optional ports) of the hosts the value may be sent to.
	Hosts []string `json:"hosts"`
	// InURL also replaces the placeholder in the request's path and query;
	// otherwise only header fields are rewritten.
	InURL bool `json:"in_url,omitempty"`
	// Header, when set, makes the secret a header transform (E2B's
	// network rules): the proxy sets this header field to the value on every
	// request to Hosts it sees (intercepted HTTPS), replacing whatever the
	// request carried there. The sandbox gets no variable Name then:
	// nothing inside needs to send it.
	Header string `json:"header,omitempty"`
	// Value, when set, is the credential given inline (see above): 8
	// bytes to 16 KiB, without CR, LF or NUL ([ValidateSecretValue]).
	Value string `json:"-"`
	// Template, for a header transform given no Value, is the field's
	// text with "${NAME}" where the value of the stored secret NAME goes
	// (see [FillTemplate]), resolved from the proxy's source per
	// request: it names values, never holds one.
	Template string `json:"template,omitempty"`
	// Placeholder is what the sandbox sees; empty means [Compile] makes a
	// random one ([Compiled.Secrets] returns it).
	Placeholder string `json:"placeholder,omitempty"`
}

// String shows the secret's name and hosts, never its value.
func (s Secret) String() string {
	if s.Header != "" {
		return fmt.Sprintf("secret %s (header %s) for %s", s.Name, s.Header, strings.Join(s.Hosts, ","))
	}
	return fmt.Sprintf("secret %s for %s", s.Name, strings.Join(s.Hosts, ","))
}

// GoString is String, so that %#v does not print the value either.
func (s Secret) GoString() string { return s.String() }

// LogValue keeps the value out of log/slog records.
func (s Secret) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", s.Name), slog.Any("hosts", s.Hosts))
}

// maxSecrets bounds the secrets of one policy, maxSecretLen a value.
const (
	maxSecrets     = 64
	maxSecretLen   = 16 << 10
	minSecretLen   = 8
	placeholderLen = 40 // len(NewPlaceholder()): "tent_", 32 hex digits, "_ph"
)

// NewPlaceholder returns a random placeholder: "tent_" followed by 32 hex
// digits and "_ph", letters, digits and underscores only, so it passes
// through headers, URLs and basic auth unchanged.
func NewPlaceholder() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "tent_" + hex.EncodeToString(b[:]) + "_ph"
}

// compiledSecret is a validated secret; value and forms are set only in
// the copies [Proxy.resolve] makes for one request.
type compiledSecret struct {
	Secret
	hosts []Rule
	// value is the value the source gave for this request ("" when it
	// has none: the secret is revoked).
	value string
	// parts are the stored values a template's value was made of.
	parts []string
	// forms are what the scrubber replaces in responses from hosts: the
	// forms (secretForms) of value and, for a header transform, of each
	// of its credentialParts, paired with the placeholder's.
	forms []scrubPair
}

// ValidateSecretValue checks a secret's value: 8 bytes to 16 KiB, without
// CR, LF or NUL. Stores check it when a value is written.
func ValidateSecretValue(v string) error {
	switch {
	case v == "":
		return errors.New("has no value")
	case len(v) < minSecretLen:
		return fmt.Errorf("value shorter than %d bytes: too short to tell apart from other text in responses, where the proxy replaces it", minSecretLen)
	case len(v) > maxSecretLen:
		return fmt.Errorf("value longer than %d bytes", maxSecretLen)
	case strings.ContainsAny(v, "\r\n\x00"):
		return errors.New("value holds CR, LF or NUL, which no header may carry")
	}
	return nil
}

// makeForms returns the forms the scrubber replaces for s carrying
// value v: those of v and, for a header transform, of its credential
// parts.
func makeForms(s *Secret, v string, stored []string) []scrubPair {
	forms := secretForms(v, s.Placeholder)
	for _, part := range stored {
		forms = append(forms, secretForms(part, s.Placeholder)...)
	}
	if s.Header != "" {
		parts := credentialParts(v)
		// A Basic credential's decoded form, and its parts (the
		// password of user:password), are the secret too.
		if raw, ok := basicCredential(v); ok && len(raw) >= minSecretLen {
			parts = append(parts, string(raw))
			parts = append(parts, credentialParts(string(raw))...)
		}
		for _, part := range parts {
			forms = append(forms, secretForms(part, s.Placeholder)...)
		}
	}
	return forms
}

func (s *compiledSecret) boundTo(host string, port int) bool {
	for _, r := range s.hosts {
		if r.matchName(host, port) {
			return true
		}
	}
	return false
}

// compileSecrets validates secrets, making placeholders where missing.
func compileSecrets(secrets []Secret) ([]compiledSecret, []error) {
	if len(secrets) > maxSecrets {
		return nil, []error{fmt.Errorf("secrets: at most %d", maxSecrets)}
	}
	var errs []error
	var out []compiledSecret
	seen := map[string]bool{}
	for i, s := range secrets {
		field := fmt.Sprintf("secrets[%d]", i)
		bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(field+" "+format, a...)) }
		switch {
		case !validEnvName(s.Name):
			bad("name %q: want a variable name such as GITHUB_TOKEN (letters, digits, _)", s.Name)
			continue
		case seen[s.Name]:
			bad("%s: given twice", s.Name)
			continue
		}
		seen[s.Name] = true
		field += " (" + s.Name + ")"
		if s.Value != "" {
			if err := ValidateSecretValue(s.Value); err != nil {
				bad("%v", err)
			}
		}
		if s.Placeholder == "" {
			s.Placeholder = NewPlaceholder()
		} else if len(s.Placeholder) < 16 || strings.Trim(s.Placeholder, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			bad("placeholder: want at least 16 letters, digits or _")
		}
		if len(s.Hosts) == 0 {
			bad("names no host: say where the value may be sent, as NAME@api.example.com")
		}
		if s.Template != "" {
			if err := checkTemplate(s); err != nil {
				bad("%v", err)
			}
		}
		if s.Header != "" && !validHeaderName(s.Header) {
			bad("header %q: want a header field name (letters, digits, '-'), not one that frames or routes the request (Host, Content-Length, Transfer-Encoding, Connection, Upgrade, Te, Trailer, Proxy-*)", s.Header)
		}
		cs := compiledSecret{Secret: s}
		cs.Hosts = nil
		for _, h := range s.Hosts {
			r, err := ParseRule(h)
			if err != nil {
				bad("host: %v", err)
				continue
			}
			if r.IsAddr() {
				bad("host %q: a secret is bound to host names, not IP addresses (TLS certificates name hosts)", h)
				continue
			}
			cs.hosts = append(cs.hosts, r)
			cs.Hosts = append(cs.Hosts, r.String())
		}
		out = append(out, cs)
	}
	for i := range out {
		for j := range out {
			if i != j && strings.Contains(out[i].Placeholder, out[j].Placeholder) {
				errs = append(errs, fmt.Errorf("secrets: the placeholder of %s contains that of %s", out[i].Name, out[j].Name))
			}
		}
	}
	return out, errs
}

// validHeaderName reports whether h may be a header transform's field:
// a token of letters, digits and '-', and none that frames, routes or
// hops the request.
func validHeaderName(h string) bool {
	if h == "" || len(h) > 128 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	switch c := http.CanonicalHeaderKey(h); {
	case c == "Host", c == "Content-Length", c == "Transfer-Encoding", c == "Connection", c == "Upgrade",
		c == "Te", c == "Trailer", c == "Keep-Alive", strings.HasPrefix(c, "Proxy-"):
		return false
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 128 || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// substitution is the outcome of rewriting one request: the secrets whose
// value went in, and those whose placeholder was left because the host is
// not theirs.
type substitution struct {
	injected []string
	kept     []string
	// made are the Basic credentials the proxy encoded with a value, each
	// (in its forms) paired with the one the sandbox sent: the scrubber
	// puts those back where the response echoes them.
	made []scrubPair
}

// substitute replaces, in req's header fields (and URL where a secret
// asks for it), the placeholders of the secrets bound to host:port with
// their values. Placeholders of other secrets are left as they are and
// reported in kept. A basic-auth Authorization field is decoded, rewritten
// and encoded again. A header transform bound to host:port sets its field.
//
// With inject false (a request in clear text) nothing is replaced: every
// placeholder found is reported in kept.
func substitute(secrets []compiledSecret, req *http.Request, host string, port int, inject bool) (sub substitution) {
	// The Basic credentials as the sandbox sent them: those the proxy
	// encodes again with values (of one secret or several) are paired
	// with them in sub.made when all are replaced.
	sent := map[string][]string{}
	for _, name := range []string{"Authorization", "Proxy-Authorization"} {
		if vs := req.Header.Values(name); len(vs) > 0 {
			sent[name] = slices.Clone(vs)
		}
	}
	defer func() {
		for name, vs := range sent {
			now := req.Header.Values(name)
			for j, v := range vs {
				if j < len(now) && now[j] != v {
					made, ok1 := basicCredential(now[j])
					was, ok2 := basicCredential(v)
					if ok1 && ok2 {
						sub.made = append(sub.made, basicForms(made, was)...)
					}
				}
			}
		}
	}()
	for i := range secrets {
		s := &secrets[i]
		bound := inject && s.boundTo(host, port)
		revoked := bound && s.value == "" // the source has no value for it
		bound = bound && !revoked
		inHeader := false
		if s.Header != "" {
			// A header transform's placeholder is never the sandbox's to
			// send (the proxy sets the header itself); it only learns it
			// from a scrubbed answer. Sent back, in any header or the URL,
			// it stays the placeholder: it must not make the proxy write
			// the value where the sandbox chooses (an echoed Basic
			// credential would carry it out base64-encoded).
			if bound {
				req.Header.Set(s.Header, s.value)
				sub.injected = append(sub.injected, s.Name)
			}
			continue
		}
		for name, vs := range req.Header {
			for j, v := range vs {
				if nv, hit := replaceIn(v, s, bound, name); hit {
					inHeader = true
					vs[j] = nv
				}
			}
		}
		inURL := strings.Contains(req.URL.RawPath, s.Placeholder) || strings.Contains(req.URL.Path, s.Placeholder) ||
			strings.Contains(req.URL.RawQuery, s.Placeholder)
		if inURL && bound && s.InURL {
			// The value is escaped whole, '/' included, so that it stays
			// one path segment (or one query value): the escaped path is
			// set explicitly, since net/http would escape Path itself and
			// leave a '/' of the value a separator.
			base := req.URL.EscapedPath()
			if !strings.Contains(base, s.Placeholder) && strings.Contains(req.URL.Path, s.Placeholder) {
				base = (&url.URL{Path: req.URL.Path}).EscapedPath() // the placeholder was sent escaped
			}
			escaped := strings.ReplaceAll(base, s.Placeholder, pathEscape(s.value))
			if p, err := url.PathUnescape(escaped); err == nil {
				req.URL.Path, req.URL.RawPath = p, escaped
			}
			req.URL.RawQuery = strings.ReplaceAll(req.URL.RawQuery, s.Placeholder, pathEscape(s.value))
		}
		switch {
		case bound && (inHeader || inURL && s.InURL):
			sub.injected = append(sub.injected, s.Name)
		case (inHeader || inURL) && revoked:
			sub.kept = append(sub.kept, s.Name+" (revoked: no value)")
		case inHeader || inURL:
			sub.kept = append(sub.kept, s.Name)
		}
		if bound && inURL && !s.InURL {
			sub.kept = append(sub.kept, s.Name+" (in the URL, where its secret does not go)")
		}
	}
	return sub
}

// replaceIn rewrites one header value; hit reports that s's placeholder
// was there (replaced only when bound).
func replaceIn(v string, s *compiledSecret, bound bool, name string) (string, bool) {
	if strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Proxy-Authorization") {
		if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil && strings.Contains(string(raw), s.Placeholder) {
				if !bound {
					return v, true
				}
				return scheme + " " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(raw), s.Placeholder, s.value))), true
			}
		}
	}
	if !strings.Contains(v, s.Placeholder) {
		return v, false
	}
	if !bound {
		return v, true
	}
	return strings.ReplaceAll(v, s.Placeholder, s.value), true
}

// basicCredential returns the decoded credential of a Basic
// Authorization value.
func basicCredential(v string) ([]byte, bool) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	return raw, err == nil
}

// pathEscape percent-encodes every byte of s but the unreserved ones: a
// value put into a path or a query then reads as itself, one segment (a
// '/' is %2F) or one query value ('&', '=', '+' and '#' are escaped).
func pathEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; unreserved(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
