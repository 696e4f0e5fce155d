package mcp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestGrepMatchesLinesAsGrep: file_grep matches each line as grep -E
// does, the newline not part of the line (so $ matches at its end, a
// "\r" before it being part of the line), in a file given alone and in
// a directory searched, a line longer than 64 KiB included; the line
// numbers are grep -nE's inside the same sandbox.
func TestGrepMatchesLinesAsGrep(t *testing.T) {
	e := start(t, sandbox.Spec{})
	content := "alpha\nbeta\ngamma\n\ndelta\necho\r\nfoxtrot\r\n" + strings.Repeat("x", 100<<10) + "tail\ngolf\nlast"
	e.ok("file_write", map[string]any{"path": "/tmp/g/words.txt", "content": content}, nil)
	for _, pattern := range []string{`delta$`, `^delta$`, `^d`, `a$`, `^$`, `o$`, `o.$`, `t$`, `tail$`, `^x+tail$`, `last$`, `^(beta|golf)$`} {
		r := e.shell("grep -nE '" + pattern + "' /tmp/g/words.txt | cut -d: -f1")
		var want []int
		for _, f := range strings.Fields(r.Stdout) {
			n, _ := strconv.Atoi(f)
			want = append(want, n)
		}
		for _, p := range []string{"/tmp/g/words.txt", "/tmp/g"} {
			var g grepOut
			e.ok("file_grep", map[string]any{"pattern": pattern, "path": p}, &g)
			var got []int
			for _, m := range g.Matches {
				got = append(got, m.Line)
			}
			if !slices.Equal(got, want) || len(want) == 0 && pattern != `o$` {
				t.Errorf("file_grep %q in %s: lines %v; grep -nE: %v", pattern, p, got, want)
			}
		}
	}
	var g grepOut
	e.ok("file_grep", map[string]any{"pattern": `delta$`, "path": "/tmp/g/words.txt"}, &g)
	if fmt.Sprint(g.Matches) != fmt.Sprint([]grepMatch{{Path: "/tmp/g/words.txt", Line: 5, Text: "delta"}}) {
		t.Errorf("file_grep delta$: %+v", g.Matches)
	}
}
