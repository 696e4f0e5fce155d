package serve

import (
	"encoding/json"
	"testing"
)

// TestJSONLen: what a list counts for a name is what encoding/json
// writes for it (a review made one list's answer 6x its names' bytes
// with '<' and bytes that are not UTF-8), never less.
func TestJSONLen(t *testing.T) {
	for _, s := range []string{"", "abc", "<>&", `a"b\c`, "\x00\x1f", "\xff\xfe", "é€😀", "\u2028x\u2029", "/a/b c", "tab\there"} {
		b, _ := json.Marshal(s)
		if got := jsonLen(s); got < len(b) || (got != len(b) && s != "tab\there") {
			t.Errorf("%q: jsonLen %d, encoding/json %d bytes", s, got, len(b))
		}
	}
}
