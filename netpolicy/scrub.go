package netpolicy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Responses from a secret's hosts never carry its value back into the
// sandbox: an API that echoes a request's headers, or an error page that
// quotes the token it refused, would otherwise hand it over. On an
// intercepted connection the proxy asks those hosts for uncompressed
// responses (it drops Accept-Encoding from the request), replaces the
// value by the placeholder in every response header field and in the
// body, streaming, and decodes a gzip body itself to do so. A body in
// another encoding it cannot read (br, zstd...) is refused with a 502.

// scrubPairs returns the values to replace, and their placeholders, in
// responses from host:port: those of the secrets bound to it.
func scrubPairs(secrets []compiledSecret, host string, port int) []scrubPair {
	var pairs []scrubPair
	for i := range secrets {
		if secrets[i].boundTo(host, port) {
			pairs = append(pairs, scrubPair{[]byte(secrets[i].Value), []byte(secrets[i].Placeholder)})
			if secrets[i].Header != "" {
				for _, part := range credentialParts(secrets[i].Value) {
					pairs = append(pairs, scrubPair{[]byte(part), []byte(secrets[i].Placeholder)})
				}
			}
		}
	}
	return pairs
}

// credentialParts returns the parts of a header transform's value that
// an upstream may echo on their own — the token of "Bearer TOKEN", the
// values of "k1=v1, k2=v2" — so that they are kept out of responses as
// the whole value is: the words between spaces, tabs, ',', ';' and '='
// that are at least minSecretLen bytes long (shorter ones would match
// ordinary text) and not the whole value; quotes and ':' separate too
// (Token token="TOKEN"). An upstream that re-encodes or re-cases the
// value can still hand it back: only its verbatim forms are removed.
func credentialParts(v string) []string {
	var parts []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(" \t,;=:\"'", r) }) {
		if len(f) >= minSecretLen && f != v && !slices.Contains(parts, f) {
			parts = append(parts, f)
		}
	}
	return parts
}

type scrubPair struct{ value, placeholder []byte }

// scrubResponse rewrites resp so that no value of pairs reaches the
// client: header fields now, the body as it is read.
func scrubResponse(resp *http.Response, pairs []scrubPair) error {
	scrubHeader(resp.Header, pairs)
	// Trailers arrive after the body, past where they could be
	// scrubbed: none are relayed.
	resp.Trailer = nil
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	body := resp.Body
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return fmt.Errorf("the gzip body of a response from a secret's host: %w", err)
		}
		body = readCloser{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	default:
		return fmt.Errorf("a response from a secret's host is encoded %q, which tent cannot check for the secret's value", enc)
	}
	same := true
	for _, p := range pairs {
		same = same && len(p.value) == len(p.placeholder)
	}
	if !same && resp.ContentLength >= 0 {
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && resp.ProtoAtLeast(1, 1) {
		resp.TransferEncoding = []string{"chunked"}
	}
	resp.Body = readCloser{&scrubReader{r: body, pairs: pairs}, body}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// scrubReader copies r with every value of pairs replaced by its
// placeholder, including a value split across reads: it holds back the
// last len(longest value)-1 bytes of what it read until more arrives.
type scrubReader struct {
	r     io.Reader
	pairs []scrubPair
	buf   []byte // read, not yet scanned (the held-back tail first)
	out   []byte // scanned, not yet returned
	obuf  []byte // out's storage, reused
	err   error
}

// scrubBuf is how much a scrubReader reads at once: with what it has
// scanned, at most twice that is held per response being relayed.
const scrubBuf = 32 << 10

func (s *scrubReader) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.buf == nil {
			s.buf = make([]byte, 0, scrubBuf)
		}
		n, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+n]
		s.err = err
		s.scan(err != nil)
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scan moves what of buf can no longer be the start of a value to out,
// replacing values; with final, all of it. What it holds back is less
// than the longest value, so buf always has room to read more.
func (s *scrubReader) scan(final bool) {
	longest := 0
	for _, p := range s.pairs {
		longest = max(longest, len(p.value))
	}
	data := s.buf
	out := s.obuf[:0]
	for {
		best, which := -1, 0
		for k, p := range s.pairs {
			if j := bytes.Index(data, p.value); j >= 0 && (best < 0 || j < best) {
				best, which = j, k
			}
		}
		if best >= 0 {
			out = append(append(out, data[:best]...), s.pairs[which].placeholder...)
			data = data[best+len(s.pairs[which].value):]
			continue
		}
		cut := len(data)
		if !final {
			cut = max(0, len(data)-(longest-1))
		}
		out = append(out, data[:cut]...)
		data = data[cut:]
		break
	}
	s.obuf, s.out = out, out
	s.buf = s.buf[:copy(s.buf, data)]
}

// scrubHeader replaces the values of pairs in every field of h.
func scrubHeader(h http.Header, pairs []scrubPair) {
	for _, vs := range h {
		for i, v := range vs {
			for _, p := range pairs {
				v = strings.ReplaceAll(v, string(p.value), string(p.placeholder))
			}
			vs[i] = v
		}
	}
}
