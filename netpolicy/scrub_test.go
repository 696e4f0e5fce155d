package netpolicy

import (
	"encoding/base64"
	"fmt"
	"html"
	htmltemplate "html/template"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestScrubReaderEveryFormSplit: each form of a value the scrubber
// knows (and a Basic credential the proxy made) is replaced by the same
// form of the placeholder however the body is cut into reads.
func TestScrubReaderEveryFormSplit(t *testing.T) {
	made := []byte("user:" + hostileKey)
	sent := []byte("user:" + hostileKeyPH)
	pairs := sortPairs(append(secretForms(hostileKey, hostileKeyPH), basicForms(made, sent)...))
	if len(pairs) < 8 {
		t.Fatalf("only %d forms", len(pairs))
	}
	var in, want strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&in, "<%s>", p.value)
		fmt.Fprintf(&want, "<%s>", p.placeholder)
	}
	if got := scrubString(in.String(), pairs); got != want.String() {
		t.Fatalf("scrubString:\n%s\nwant\n%s", got, want.String())
	}
	for size := 1; size <= 64; size++ {
		r := &scrubReader{r: &chunkReader{s: in.String(), n: size}, pairs: pairs}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want.String() {
			t.Fatalf("reads of %d: %v\n%s\nwant\n%s", size, err, got, want.String())
		}
	}
}

// FuzzScrubReader: however a body is cut into reads, the scrubber
// streams out what it makes of the whole body at once, and no value is
// left in it that was not made of placeholders.
func FuzzScrubReader(f *testing.F) {
	f.Add("..SECRET..SECRETSECRET.AB.SECRE", "SECRET", "AB", uint8(3))
	f.Add("xxABCABCDyy", "ABCD", "ABC", uint8(1))
	f.Fuzz(func(t *testing.T, in, v1, v2 string, size uint8) {
		// Values hold no CR, LF or NUL (Compile refuses them), which the
		// scrubber relies on.
		if v1 == "" || v2 == "" || len(v1) > 64 || len(v2) > 64 || size == 0 || strings.ContainsAny(v1+v2, "\r\n\x00") {
			return
		}
		pairs := sortPairs([]scrubPair{{[]byte(v1), []byte("<1>")}, {[]byte(v2), []byte("<2>")}})
		want := scrubString(in, pairs)
		got, err := io.ReadAll(&scrubReader{r: &chunkReader{s: in, n: int(size)}, pairs: pairs})
		if err != nil || string(got) != want {
			t.Fatalf("reads of %d: %q %v, want %q", size, got, err, want)
		}
		if !strings.ContainsAny(v1+v2, "<>12") && (strings.Contains(want, v1) || strings.Contains(want, v2)) {
			t.Fatalf("%q holds a value", want)
		}
	})
}

// TestScrubReaderStreams: a streamed body of lines (server-sent events,
// JSON lines) is not held up: what ends in a line end is returned at
// once, without waiting for the next read (no value holds a line end);
// the last bytes after it are held, whatever they are (see
// TestScrubReaderNoPrefixOracle), and a value split across reads is
// still found.
func TestScrubReaderStreams(t *testing.T) {
	pairs := sortPairs(secretForms(hostileKey, hostileKeyPH))
	long := strings.Repeat("x", 200)
	for _, tc := range []struct{ event, first string }{
		{"data: {\"token\": \"hello\"}\n\n", "data: {\"token\": \"hello\"}\n\n"},
		{"data: pk/S3\n\n", "data: pk/S3\n\n"},
		{"data: pk%2FS3\r\n", "data: pk%2FS3\r\n"},
		{"data: 1\n\ndata: pk/S3", "data: 1\n\n"},
		{"data: 1\n\ndata: hello", "data: 1\n\n"},
		{long + "pk/S3", long[:len(long)+5-(longestValue(pairs)-1)]},
	} {
		src := &onceReader{s: tc.event}
		r := &scrubReader{r: src, pairs: pairs}
		b := make([]byte, 1024)
		n, err := r.Read(b)
		if err != nil || string(b[:n]) != tc.first || src.calls != 1 {
			t.Errorf("%q: first Read %q %v after %d reads, want %q after 1", tc.event, b[:n], err, src.calls, tc.first)
		}
	}
}

// onceReader returns s on its first Read, then io.EOF.
type onceReader struct {
	s     string
	calls int
}

func (o *onceReader) Read(b []byte) (int, error) {
	o.calls++
	if o.calls > 1 {
		return 0, io.EOF
	}
	return copy(b, o.s), nil
}

// TestNetLogPathCutKeepsNoValue: the network log keeps the path the
// sandbox sent, cut to 512 bytes: cut where the value was put in, the
// path would hold a piece of it, which no scrubbing of the record finds.
func TestNetLogPathCutKeepsNoValue(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	})
	ih := newHostileHarness(t, o)
	pad := "/" + strings.Repeat("a", 490)
	ih.rawExchange(t, "api.example.com", "GET "+pad+"/"+hostileKeyPH+"/x HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if !strings.Contains(o.last(t).RequestURI, pathEscape(hostileKey)) {
		t.Fatalf("the origin received %q", o.last(t).RequestURI)
	}
	ih.proxy.Close()
	esc := pathEscape(hostileKey)
	for _, r := range ih.audit.records(t) {
		if r.Event != EventRequest {
			continue
		}
		if want := clampText(pad+"/"+hostileKeyPH+"/x", 512); r.Path != want {
			t.Errorf("path %q, want %q", r.Path, want)
		}
		for n := 8; n <= len(esc); n++ {
			if strings.Contains(r.Path, esc[:n]) {
				t.Fatalf("the log's path holds %q, the start of the value", esc[:n])
			}
		}
	}
}

// TestRecordScrubbed: whatever a record is given, the audit log holds no
// value of the policy's secrets, current or retired (the last net under
// the callers, which record what the sandbox sent).
func TestRecordScrubbed(t *testing.T) {
	o := newHostileOrigin(t, func(o *hostileOrigin, r *http.Request) string { return "" })
	ih := newHostileHarness(t, o)
	ih.proxy.record(AuditRecord{Event: EventDecision, Reason: "quoted " + hostileToken + " " + base64.StdEncoding.EncodeToString([]byte("u:"+hostileKey)), Path: "/" + pathEscape(hostileKey)})
	ih.proxy.Close()
	assertNoValue(t, "record", ih.auditText())
	if !strings.Contains(ih.auditText(), `"reason":"quoted `+hostileTokenPH+" ") {
		t.Errorf("log: %s", ih.auditText())
	}
}

// TestSecretFormsQuoted: a value with '/', '"' and non-ASCII letters,
// quoted by the JSON encoders APIs use (Go's, PHP's escaping '/',
// Python's escaping non-ASCII) or by Go's %q, is found in each.
func TestSecretFormsQuoted(t *testing.T) {
	const v, ph = `q/"value"-é-😀-<x>`, "tent_33333333333333333333333333333333_ph"
	pairs := sortPairs(secretForms(v, ph))
	for _, quoted := range []string{
		`{"k":"q/\"value\"-é-😀-\u003cx\u003e"}`,        // Go
		`{"k":"q\/\"value\"-é-😀-<x>"}`,                 // PHP
		`{"k": "q/\"value\"-\u00e9-\ud83d\ude00-<x>"}`, // Python
		`{"k":"q\/\"value\"-\u00e9-\ud83d\ude00-<x>"}`, // PHP's default (non-ASCII escaped too)
		fmt.Sprintf("%q", v),
	} {
		if got := scrubString(quoted, pairs); strings.Contains(got, "value") {
			t.Errorf("%s: scrubbed to %s", quoted, got)
		}
	}
}

// TestScrubReaderNoPrefixOracle: what the scrubber returns before it
// reads more does not depend on the value. A sandbox that makes a
// secret's host stream its own text back (a full-duplex echo: Node's
// req.pipe(res)) and sends "guess" + one byte at a time would otherwise
// learn, from which echoes come back before it sends more, which bytes
// start a form of the value: the whole value, a byte per 256 tries.
func TestScrubReaderNoPrefixOracle(t *testing.T) {
	// Two values whose forms have the same lengths.
	const v1, v2 = "Abcdefgh0123456789-secret-ONE", "Zyxwvuts9876543210-secret-TWO"
	const ph = "tent_44444444444444444444444444444444_ph"
	first := func(v, in string) (string, int) {
		src := &onceReader{s: in}
		b := make([]byte, 4096)
		n, err := (&scrubReader{r: src, pairs: sortPairs(secretForms(v, ph))}).Read(b)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return string(b[:n]), src.calls
	}
	pad := strings.Repeat("x", 100)
	for _, v := range []string{v1, v2} {
		for _, f := range secretForms(v, ph) {
			for _, k := range []int{1, 5, len(f.value) - 1} {
				for _, in := range []string{"guess " + string(f.value[:k]), pad + string(f.value[:k]), "line\n" + string(f.value[:k])} {
					got1, calls1 := first(v1, in)
					got2, calls2 := first(v2, in)
					if got1 != got2 || calls1 != calls2 {
						t.Fatalf("%q: before reading more, with one value the scrubber returned %q (after %d reads), with the other %q (after %d)",
							in, got1, calls1, got2, calls2)
					}
				}
			}
		}
	}
}

// TestSecretFormsHTML: a value with every character HTML escapes, as
// the escapers of common web frameworks write it, is found in each.
func TestSecretFormsHTML(t *testing.T) {
	const v, ph = `q+"v'a&l<u>e"-secret`, "tent_55555555555555555555555555555555_ph"
	pairs := sortPairs(secretForms(v, ph))
	var goTemplate strings.Builder
	htmltemplate.Must(htmltemplate.New("").Parse(`{{.}}`)).Execute(&goTemplate, v)
	for _, escaped := range []string{
		goTemplate.String(),                             // Go html/template
		html.EscapeString(v),                            // Go html, text/template, Jinja2
		`q+&quot;v&#x27;a&amp;l&lt;u&gt;e&quot;-secret`, // Python html.escape, Django
		`q+&quot;v&#039;a&amp;l&lt;u&gt;e&quot;-secret`, // PHP htmlspecialchars
		`q+&quot;v&#39;a&amp;l&lt;u&gt;e&quot;-secret`,  // Ruby, Rails, Spring, escape-html
		`q+&quot;v&apos;a&amp;l&lt;u&gt;e&quot;-secret`, // XML
		`q+"v'a&amp;l&lt;u&gt;e"-secret`,                // text only
	} {
		if got := scrubString("<p>"+escaped+"</p>", pairs); got != "<p>"+ph+"</p>" {
			t.Errorf("%s: scrubbed to %s", escaped, got)
		}
	}
}

func TestScrubReaderSplits(t *testing.T) {
	pairs := []scrubPair{{[]byte("SECRET"), []byte("ph_long_placeholder")}, {[]byte("AB"), []byte("x")}}
	in := "..SECRET..SECRETSECRET.AB.SECRE"
	want := "..ph_long_placeholder..ph_long_placeholderph_long_placeholder.x.SECRE"
	for size := 1; size <= len(in); size++ {
		r := &scrubReader{r: &chunkReader{s: in, n: size}, pairs: pairs}
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want {
			t.Errorf("reads of %d: %q %v, want %q", size, got, err, want)
		}
	}
}

// chunkReader returns s n bytes per read.
type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(b []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), c.n)], c.s)
	c.s = c.s[k:]
	return k, nil
}
