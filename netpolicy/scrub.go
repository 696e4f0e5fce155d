package netpolicy

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Responses from a secret's hosts never carry its value back into the
// sandbox: an API that echoes a request's headers, or an error page that
// quotes the token it refused, would otherwise hand it over. Every byte
// such a host sends that the proxy relays passes through the scrubber:
// the status line (of interim 1xx responses too), header field names
// (matched regardless of case, since net/http re-cases them) and values,
// the body, streaming; trailers are never relayed; tent's own error texts
// never quote what the host sent. On an intercepted connection the proxy
// asks those hosts for uncompressed responses (it drops Accept-Encoding
// from the request), and decodes a gzip body itself; a body in another
// encoding it cannot read (br, zstd...) is refused with a 502.
//
// The scrubber knows every form of a value that the proxy itself
// produced or that a common echo produces of it (see secretForms): the
// value as it is, percent-encoded (as in_url places it), JSON- or
// Go-quoted, HTML-escaped, and inside any base64 (a Basic credential the proxy
// encoded), each replaced by the same form of the placeholder; the
// exact Basic credentials the proxy made for a request become again the
// ones the sandbox sent. An origin that encodes the value its own way
// (hex, reversed, compressed, encrypted, a character at a time) can
// still hand it over: no proxy can find a value it cannot recognise.

// errUnreadableEncoding is the failure of a response from a secret's
// host whose body tent cannot read; it does not quote the encoding (the
// host chose it).
var errUnreadableEncoding = errors.New("a response from a secret's host is encoded in a way tent cannot check for the secret's value (it reads gzip and identity)")

// scrubResponse rewrites resp so that no value of pairs reaches the
// client: its head now, the body as it is read.
func scrubResponse(resp *http.Response, pairs []scrubPair) error {
	scrubHead(resp, pairs)
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	body := resp.Body
	switch enc := contentCodings(resp.Header); {
	case len(enc) == 0:
	case len(enc) == 1 && (enc[0] == "gzip" || enc[0] == "x-gzip"):
		zr, err := gzip.NewReader(body)
		if err != nil {
			return errors.New("the gzip body of a response from a secret's host cannot be read")
		}
		body = readCloser{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	default:
		return errUnreadableEncoding
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

// contentCodings returns the content codings of every Content-Encoding
// field of h, in order, lower-cased, without "identity": a client reads
// them all (curl decodes a gzip named by a second field), not only the
// first field's.
func contentCodings(h http.Header) []string {
	var codings []string
	for _, f := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(f, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	return codings
}

type readCloser struct {
	io.Reader
	io.Closer
}

// scrubReader copies r with every value of pairs replaced by its
// placeholder, including a value split across reads: it holds back the
// last len(longest value)-1 bytes it read (those after the last line end
// among them) until more arrives.
type scrubReader struct {
	r     io.Reader
	pairs []scrubPair
	buf   []byte // read, not yet scanned (the held-back tail first)
	out   []byte // scanned, not yet returned
	obuf  []byte // out's storage, reused
	next  []int  // scratch of scan
	err   error
}

// scrubBuf is how much a scrubReader reads at once (more when a form of a
// value is longer): with what it has scanned, at most about twice that is
// held per response being relayed.
const scrubBuf = 32 << 10

func (s *scrubReader) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.buf == nil {
			s.buf = make([]byte, 0, max(scrubBuf, 2*longestValue(s.pairs)))
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

func longestValue(pairs []scrubPair) int {
	longest := 0
	for _, p := range pairs {
		longest = max(longest, len(p.value))
	}
	return longest
}

// scan moves what of buf can no longer be the start of a value to out,
// replacing values; with final, all of it. What it holds back is less
// than the longest value, so buf always has room to read more.
func (s *scrubReader) scan(final bool) {
	var rest []byte
	s.obuf, rest, s.next = replacePairs(s.obuf[:0], s.buf, s.pairs, final, s.next)
	s.out = s.obuf
	s.buf = s.buf[:copy(s.buf, rest)]
}

// replacePairs appends data to out with every value of pairs replaced by
// its placeholder, the earliest first (the longest of those starting at
// the same byte, pairs being sorted so). Unless final, it stops within
// the last len(longest value)-1 bytes, after the last CR, LF or NUL
// there, and returns the bytes from there as rest: every value starting
// before them lies whole in data. next is scratch space, returned for
// reuse.
func replacePairs(out, data []byte, pairs []scrubPair, final bool, next []int) (_, rest []byte, _ []int) {
	limit := len(data)
	if !final {
		// Every value starting before len-(longest-1) lies whole in
		// data. No form of a value holds a CR, LF or NUL, so none that
		// starts before the last of them in the bytes after reaches past
		// it: those before it are not held back either, so a stream of
		// lines (server-sent events, JSON lines) is not held up. What is
		// held back depends on data and the longest form's length alone,
		// never on whether the bytes could start a value: a sandbox that
		// has a secret's host stream its own text back (a full-duplex
		// echo) would otherwise learn, from what comes back before it
		// sends more, which bytes start a value, one byte at a time.
		limit = min(len(data), max(0, len(data)-(longestValue(pairs)-1)))
		if i := bytes.LastIndexAny(data[limit:], "\r\n\x00"); i >= 0 {
			limit += i + 1
		}
	}
	// next[k]: where pairs[k] next occurs at or after pos, -1 for nowhere
	// before limit. Kept across matches, so each value is searched for
	// again only when a replacement went past where it was found.
	next = slices.Grow(next[:0], len(pairs))[:len(pairs)]
	for k := range next {
		next[k] = -2 // not searched yet
	}
	pos := 0
	for pos < limit {
		best, which := -1, 0
		for k, p := range pairs {
			if next[k] == -2 || next[k] >= 0 && next[k] < pos {
				next[k] = -1
				if j := bytes.Index(data[pos:], p.value); j >= 0 && pos+j < limit {
					next[k] = pos + j
				}
			}
			if next[k] >= 0 && (best < 0 || next[k] < best) {
				best, which = next[k], k
			}
		}
		if best < 0 {
			break
		}
		out = append(append(out, data[pos:best]...), pairs[which].placeholder...)
		pos = best + len(pairs[which].value)
	}
	if pos < limit {
		out = append(out, data[pos:limit]...)
		pos = limit
	}
	return out, data[pos:], next
}

// scrubString returns s with every value of pairs replaced.
func scrubString(s string, pairs []scrubPair) string {
	if len(pairs) == 0 {
		return s
	}
	out, _, _ := replacePairs(nil, []byte(s), pairs, true, nil)
	return string(out)
}

// scrubFold is scrubString matching values regardless of ASCII case, for
// header field names (which net/http re-cases, and which are read
// regardless of case).
func scrubFold(s string, pairs []scrubPair) string {
	low := []byte(strings.ToLower(s))
	if len(low) != len(s) { // not ASCII: bytes would not line up
		low = []byte(s)
	}
	lowPairs := make([]scrubPair, len(pairs))
	for i, p := range pairs {
		lowPairs[i] = scrubPair{bytes.ToLower(p.value), p.placeholder}
		if len(lowPairs[i].value) != len(p.value) {
			lowPairs[i].value = p.value
		}
	}
	var b strings.Builder
	pos := 0
	for pos < len(low) {
		best, which := -1, 0
		for k, p := range lowPairs {
			if j := bytes.Index(low[pos:], p.value); j >= 0 && (best < 0 || pos+j < best) {
				best, which = pos+j, k
			}
		}
		if best < 0 {
			break
		}
		b.WriteString(s[pos:best])
		b.Write(lowPairs[which].placeholder)
		pos = best + len(lowPairs[which].value)
	}
	b.WriteString(s[pos:])
	return b.String()
}

// scrubHead replaces the values of pairs in the head of resp (a final
// or an interim response): the status line's reason phrase, the names
// and values of the header fields. Trailers arrive after the body, past
// where they could be scrubbed: none are relayed.
func scrubHead(resp *http.Response, pairs []scrubPair) {
	resp.Trailer = nil
	if len(pairs) == 0 {
		return
	}
	resp.Status = scrubString(resp.Status, pairs)
	h := resp.Header
	for name, vs := range h {
		for i, v := range vs {
			vs[i] = scrubString(v, pairs)
		}
		if clean := scrubFold(name, pairs); clean != name {
			delete(h, name)
			h[clean] = append(h[clean], vs...)
		}
	}
}

// scrubbedError is an error whose text, which may quote what a secret's
// host sent, went through the scrubber.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubError returns err with its text scrubbed of pairs.
func scrubError(err error, pairs []scrubPair) error {
	if err == nil || len(pairs) == 0 {
		return err
	}
	return &scrubbedError{scrubString(err.Error(), pairs), err}
}
