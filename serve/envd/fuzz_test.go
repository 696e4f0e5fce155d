package envd

import (
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// partFileName decodes any Content-Disposition without panicking; what it
// accepts is a non-empty name without NUL, and a name formatted by
// mime.FormatMediaType comes back whole.
func FuzzPartFileName(f *testing.F) {
	for _, s := range []string{
		`form-data; name="file"; filename="/home/user/a b.txt"`,
		`form-data; name="file"; filename*=UTF-8''%E2%82%AC.txt`,
		`form-data; name="file"; filename="a%22b%0Ac"`,
		`form-data; name="file"`,
		`form-data; filename="x\"y"`,
		`;;;`,
	} {
		f.Add(s, "/tmp/x")
	}
	f.Fuzz(func(t *testing.T, disposition, name string) {
		if got, err := partFileName(disposition); err == nil && (got == "" || strings.ContainsRune(got, 0)) {
			t.Errorf("%q: accepted %q", disposition, got)
		}
		formatted := mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": name})
		if formatted == "" || name == "" || strings.ContainsRune(name, 0) {
			return
		}
		lower := strings.ToLower(name)
		if strings.Contains(lower, "%0a") || strings.Contains(lower, "%0d") || strings.Contains(lower, "%22") {
			return // decoded on purpose
		}
		if got, err := partFileName(formatted); err != nil || got != name {
			t.Errorf("%q (from %q): %q, %v", formatted, name, got, err)
		}
	})
}

// The download writer, fed any helper output in any pieces, never
// panics, never sends more than the length it announced, and announces
// it as Content-Length.
func FuzzDownloadWriter(f *testing.F) {
	f.Add([]byte("5\nhello"), uint8(2))
	f.Add([]byte("0\n"), uint8(1))
	f.Add([]byte("3\nabcdef"), uint8(4))
	f.Add([]byte("x\n"), uint8(1))
	f.Add([]byte("99999999999999999999999\n"), uint8(3))
	f.Fuzz(func(t *testing.T, out []byte, piece uint8) {
		rec := httptest.NewRecorder()
		d := &downloadWriter{w: rec, name: "f", size: -1}
		step := int(piece) + 1
		for i := 0; i < len(out); i += step {
			if _, err := d.Write(out[i:min(i+step, len(out))]); err != nil {
				break
			}
		}
		if d.size >= 0 && d.sent > d.size {
			t.Errorf("sent %d of %d", d.sent, d.size)
		}
		if int64(rec.Body.Len()) != d.sent {
			t.Errorf("body %d bytes, counted %d", rec.Body.Len(), d.sent)
		}
		if d.committed {
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Length") != strconv.FormatInt(d.size, 10) {
				t.Errorf("committed %d with length %q for %d", rec.Code, rec.Header().Get("Content-Length"), d.size)
			}
		} else if rec.Body.Len() != 0 {
			t.Errorf("bytes sent before the length")
		}
	})
}
