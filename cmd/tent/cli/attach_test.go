package cli

import "testing"

// The detach keys (Ctrl-P Ctrl-Q) end an attach on a terminal, across
// reads too; a Ctrl-P followed by anything else reaches the command.
func TestDetachScanner(t *testing.T) {
	for _, c := range []struct {
		reads  []string
		want   string
		detach bool
	}{
		{[]string{"ls\r"}, "ls\r", false},
		{[]string{"a\x10\x11b"}, "a", true},
		{[]string{"a\x10", "\x11"}, "a", true},
		{[]string{"\x10x"}, "\x10x", false},
		{[]string{"\x10", "\x10", "\x11"}, "\x10", true},
		{[]string{"\x11\x10"}, "\x11", false},
	} {
		var d detachScanner
		var got []byte
		detach := false
		for _, r := range c.reads {
			out, hit := d.scan([]byte(r))
			got = append(got, out...)
			if hit {
				detach = true
				break
			}
		}
		if string(got) != c.want || detach != c.detach {
			t.Errorf("%q: %q, detach %v; want %q, %v", c.reads, got, detach, c.want, c.detach)
		}
	}
}
