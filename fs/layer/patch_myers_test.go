package layer

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// ptCheckScript fails unless del and ins describe an edit script of a
// into b (unmarked lines match in order) and returns its number of edits.
func ptCheckScript(t *testing.T, a, b []uint32, del, ins []bool) int {
	t.Helper()
	var keptA, keptB []uint32
	edits := 0
	for i, d := range del {
		if d {
			edits++
		} else {
			keptA = append(keptA, a[i])
		}
	}
	for j, d := range ins {
		if d {
			edits++
		} else {
			keptB = append(keptB, b[j])
		}
	}
	if fmt.Sprint(keptA) != fmt.Sprint(keptB) {
		t.Fatalf("kept lines differ: %v vs %v (a %v, b %v)", keptA, keptB, a, b)
	}
	return edits
}

// ptLCS is the textbook quadratic longest common subsequence length.
func ptLCS(a, b []uint32) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] > cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func ptRandSeq(r *rand.Rand, n, alphabet int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(r.Intn(alphabet))
	}
	return s
}

// Within its cost limit the diff is minimal: as many edits as the
// longest common subsequence allows.
func TestDiffLinesIsMinimal(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for n := 0; n < 3000; n++ {
		a := ptRandSeq(r, r.Intn(40), 1+r.Intn(6))
		b := ptRandSeq(r, r.Intn(40), 1+r.Intn(6))
		del, ins := make([]bool, len(a)), make([]bool, len(b))
		diffLines(a, b, del, ins, 1<<30)
		if got, want := ptCheckScript(t, a, b, del, ins), len(a)+len(b)-2*ptLCS(a, b); got != want {
			t.Fatalf("%v -> %v: %d edits, minimal is %d", a, b, got, want)
		}
	}
}

// Past the cost limit and past the budget the script stays valid, and
// the steps spent stay within the budget (plus one round).
func TestDiffLinesBounds(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	unique := func(n, base int) []uint32 {
		s := make([]uint32, n)
		for i := range s {
			s[i] = uint32(base + i)
		}
		return s
	}
	alternating := func(n int, x, y uint32) []uint32 {
		s := make([]uint32, n)
		for i := range s {
			s[i] = x
			if i%2 == 1 {
				s[i] = y
			}
		}
		return s
	}
	for _, c := range []struct {
		name   string
		a, b   []uint32
		budget int
	}{
		{"no common line", unique(5000, 0), unique(5000, 10000), 1 << 30},
		{"over the cost limit", ptRandSeq(r, 20000, 20000), ptRandSeq(r, 20000, 20000), 1 << 30},
		{"few symbols, tiny budget", ptRandSeq(r, 20000, 3), ptRandSeq(r, 20000, 3), 1000},
		{"shifted pairs, tiny budget", alternating(20000, 1, 2), alternating(20001, 2, 1), 100},
		{"no budget", ptRandSeq(r, 300, 4), ptRandSeq(r, 300, 4), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			del, ins := make([]bool, len(c.a)), make([]bool, len(c.b))
			spent := diffLines(c.a, c.b, del, ins, c.budget)
			ptCheckScript(t, c.a, c.b, del, ins)
			limit := 256
			for limit*limit < len(c.a)+len(c.b) {
				limit *= 2
			}
			if max := c.budget + len(c.a) + 2*limit + 1; spent > max {
				t.Errorf("spent %d steps, budget %d allows %d", spent, c.budget, max)
			}
		})
	}
}

// ptApplyHunks applies unified hunks (as writeHunks writes them) to a.
func ptApplyHunks(t *testing.T, a []string, hunks string) []string {
	t.Helper()
	var out []string
	next := 0
	sc := bufio.NewScanner(strings.NewReader(hunks))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "@@ -"):
			parts := strings.Split(strings.Fields(line)[1][1:], ",")
			start, _ := strconv.Atoi(parts[0])
			if len(parts) == 1 || parts[1] != "0" {
				start-- // the index of the hunk's first old line; else the hunk follows line start
			}
			for ; next < start; next++ {
				out = append(out, a[next])
			}
		case line[0] == ' ' || line[0] == '-':
			if a[next] != line[1:]+"\n" {
				t.Fatalf("hunk line %q does not match line %d %q", line, next+1, a[next])
			}
			if line[0] == ' ' {
				out = append(out, a[next])
			}
			next++
		case line[0] == '+':
			out = append(out, line[1:]+"\n")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	return append(out, a[next:]...)
}

// The hunks of random edits to a long text turn it into the new one.
func TestWriteHunksAppliesToTheNewText(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for n := 0; n < 300; n++ {
		var a, b []string
		for i := r.Intn(200); i > 0; i-- {
			a = append(a, fmt.Sprintf("line %d\n", r.Intn(30)))
		}
		for _, l := range a {
			switch r.Intn(10) {
			case 0:
			case 1:
				b = append(b, fmt.Sprintf("new %d\n", r.Intn(5)), l)
			case 2:
				b = append(b, fmt.Sprintf("changed %d\n", r.Intn(5)))
			default:
				b = append(b, l)
			}
		}
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		writeHunks(w, splitLines([]byte(strings.Join(a, ""))), splitLines([]byte(strings.Join(b, ""))))
		w.Flush()
		if got := ptApplyHunks(t, a, out.String()); strings.Join(got, "") != strings.Join(b, "") {
			t.Fatalf("hunks\n%s\nturn %q into %q, want %q", out.String(), a, got, b)
		}
		if len(a) == len(b) && strings.Join(a, "") == strings.Join(b, "") && out.Len() != 0 {
			t.Fatalf("hunks for equal texts: %s", out.String())
		}
	}
}

func TestWriteHunksHeaders(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"", "x\n", "@@ -0,0 +1 @@\n+x\n"},
		{"x\n", "", "@@ -1 +0,0 @@\n-x\n"},
		{"a\nb\n", "a\nc", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\n5\nX\n7\n8\n9\n", "@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+X\n 7\n 8\n 9\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\nY\n",
			"@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n 4\n@@ -13,4 +13,4 @@\n 13\n 14\n 15\n-16\n+Y\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n", "X\n2\n3\n4\n5\n6\n7\nY\n",
			"@@ -1,8 +1,8 @@\n-1\n+X\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+Y\n"},
	} {
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		writeHunks(w, splitLines([]byte(c.a)), splitLines([]byte(c.b)))
		w.Flush()
		if out.String() != c.want {
			t.Errorf("hunks of %q -> %q:\n%s\nwant\n%s", c.a, c.b, out.String(), c.want)
		}
	}
}
