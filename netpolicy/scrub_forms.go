package netpolicy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scrubPairs returns the values to replace, and their placeholders, in
// responses from host:port: every form of those of the secrets bound to
// it, longest first.
func scrubPairs(secrets []compiledSecret, host string, port int) []scrubPair {
	var pairs []scrubPair
	for i := range secrets {
		if secrets[i].boundTo(host, port) {
			pairs = append(pairs, secrets[i].forms...)
		}
	}
	return sortPairs(pairs)
}

// allPairs returns every form of every secret of secrets: what no log
// record may hold.
func allPairs(secrets []compiledSecret) []scrubPair {
	var pairs []scrubPair
	for i := range secrets {
		pairs = append(pairs, secrets[i].forms...)
	}
	return sortPairs(pairs)
}

// sortPairs orders pairs longest value first: where two forms start at
// the same byte (a padded and an unpadded base64), the longer one is
// replaced.
func sortPairs(pairs []scrubPair) []scrubPair {
	slices.SortStableFunc(pairs, func(a, b scrubPair) int { return len(b.value) - len(a.value) })
	return pairs
}

// secretForms returns the forms of the value v the scrubber replaces,
// each paired with the same form of the placeholder ph:
//
//   - v itself;
//   - percent-encoded: every byte but the unreserved ones escaped, with
//     upper-case hex digits (as the proxy writes it into a path or a
//     query) and lower-case ones, and as url.QueryEscape and
//     url.PathEscape write it;
//   - quoted: inside a JSON string (with and without HTML escapes, with
//     '/' escaped as PHP writes it, non-ASCII escaped as Python writes
//     it) and a Go string literal;
//   - HTML- or XML-escaped, as common web frameworks write it (an error
//     page quoting the token it refused);
//   - base64: the characters of a standard or URL-alphabet base64 that
//     depend on v's bytes alone, for each of the three offsets v can
//     start at in what was encoded (so the base64 of "user:" + v in a
//     Basic credential, of v alone, or of anything around v, padded or
//     not), replaced by the placeholder's characters at the same offset.
//
// Forms equal to v, or to one another, are listed once.
func secretForms(v, ph string) []scrubPair {
	var pairs []scrubPair
	seen := map[string]bool{}
	add := func(val, rep string) {
		if val != "" && !seen[val] {
			seen[val] = true
			pairs = append(pairs, scrubPair{[]byte(val), []byte(rep)})
		}
	}
	add(v, ph)
	add(pathEscape(v), pathEscape(ph))
	add(lowerEscapes(pathEscape(v)), lowerEscapes(pathEscape(ph)))
	add(url.QueryEscape(v), url.QueryEscape(ph))
	add(url.PathEscape(v), url.PathEscape(ph))
	for _, html := range []bool{true, false} {
		add(jsonInner(v, html), jsonInner(ph, html))
	}
	// As PHP's json_encode writes it ("\/", non-ASCII as \uXXXX unless
	// told not to), and Python's json.dumps (non-ASCII as \uXXXX).
	php := strings.ReplaceAll(jsonInner(v, false), "/", `\/`)
	add(php, ph)
	add(asciiJSON(php), ph)
	add(asciiJSON(jsonInner(v, false)), ph)
	add(goInner(v), goInner(ph))
	// As an HTML or XML page quotes it (an error page quoting the token
	// it refused), escaped as the common escapers write it.
	for _, r := range htmlEscapers {
		add(r.Replace(v), ph)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for off := range 3 {
			add(base64Core(enc, v, off), base64Core(enc, ph, off))
		}
	}
	return pairs
}

// htmlEscapers write a string as the HTML (or XML) escapers of common
// web frameworks do: '&', '<' and '>' always, quotes in one of their
// ways, and '+' as Go's html/template does.
var htmlEscapers = []*strings.Replacer{
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "+", "&#43;"), // Go's html/template
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;"),               // Go's html and text/template, Jinja2
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;"),             // Python's html.escape, Django
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#039;"),             // PHP's htmlspecialchars
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;"),              // Ruby, Rails, Spring, escape-html
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;"),             // XML
	strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;"),                                           // text, quotes as they are
}

// base64Core returns the characters of enc's encoding of off bytes
// followed by v that depend on v's bytes alone: whatever precedes and
// follows v, its base64 holds them.
func base64Core(enc *base64.Encoding, v string, off int) string {
	s := enc.EncodeToString(append(make([]byte, off, off+len(v)), v...))
	return s[(8*off+5)/6 : 8*(off+len(v))/6]
}

// lowerEscapes writes the hex digits of the percent-escapes of s in lower
// case.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerByte(b[i+1]), lowerByte(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonInner is s as written inside a JSON string, escaping HTML
// characters as encoding/json does by default, or not.
func jsonInner(s string, html bool) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(html)
	if err := e.Encode(s); err != nil {
		return ""
	}
	q := strings.TrimSuffix(b.String(), "\n")
	return q[1 : len(q)-1]
}

// asciiJSON writes the non-ASCII characters of a JSON string's inside
// as \u escapes (UTF-16, as JSON has them).
func asciiJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// goInner is s as written inside a Go string literal (%q).
func goInner(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// credentialParts returns the parts of a header transform's value that
// an upstream may echo on their own — the token of "Bearer TOKEN", the
// values of "k1=v1, k2=v2" — so that they are kept out of responses as
// the whole value is: the words between spaces, tabs, ',', ';' and '='
// that are at least minSecretLen bytes long (shorter ones would match
// ordinary text) and not the whole value; quotes and ':' separate too
// (Token token="TOKEN"). An upstream that re-encodes or re-cases the
// value can still hand it back: only the forms of secretForms are
// removed.
func credentialParts(v string) []string {
	var parts []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(" \t,;=:\"'", r) }) {
		if len(f) >= minSecretLen && f != v && !slices.Contains(parts, f) {
			parts = append(parts, f)
		}
	}
	return parts
}

// basicForms returns the forms of a Basic credential the proxy made
// (made: the base64 it wrote) to put back the one the sandbox sent in
// its place (sent: what the sandbox wrote, decoded to raw): padded or
// not, in the standard or the URL alphabet.
func basicForms(made, sent []byte) []scrubPair {
	var pairs []scrubPair
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		m := enc.EncodeToString(made)
		if !slices.ContainsFunc(pairs, func(p scrubPair) bool { return string(p.value) == m }) {
			pairs = append(pairs, scrubPair{[]byte(m), []byte(enc.EncodeToString(sent))})
		}
	}
	return pairs
}

type scrubPair struct{ value, placeholder []byte }
