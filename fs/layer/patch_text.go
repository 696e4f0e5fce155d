package layer

import (
	"bufio"
	"bytes"
	"fmt"
)

// patchContext is the number of unchanged lines around each change in a
// hunk, as diff -u and git diff write by default.
const patchContext = 3

// diffBudget is the number of steps the line diff of texts with n and m
// lines may spend (see patch_myers.go): linear in their size.
func diffBudget(n, m int) int { return 1<<22 + 64*(n+m) }

// writeHunks writes the unified-diff hunks that turn text a into b.
func writeHunks(w *bufio.Writer, a, b lines) {
	na, nb := a.n(), b.n()
	// Lines equal at both ends need no ids and no diff.
	pre := 0
	for pre < na && pre < nb && bytes.Equal(a.line(pre), b.line(pre)) {
		pre++
	}
	suf := 0
	for suf < na-pre && suf < nb-pre && bytes.Equal(a.line(na-1-suf), b.line(nb-1-suf)) {
		suf++
	}
	t := newLineIDs(&a, &b, na-pre-suf+nb-pre-suf)
	ida := make([]uint32, na-pre-suf)
	for i := range ida {
		ida[i] = t.id(0, pre+i)
	}
	idb := make([]uint32, nb-pre-suf)
	for j := range idb {
		idb[j] = t.id(1, pre+j)
	}
	t = nil
	del, ins := make([]bool, na), make([]bool, nb)
	diffLines(ida, idb, del[pre:na-suf], ins[pre:nb-suf], diffBudget(len(ida), len(idb)))
	ida, idb = nil, nil

	// next finds the first group of changed lines at or after lines i of
	// a and j of b (matched pairs before it are skipped). Groups are
	// found twice, to size a hunk and to print it, and never stored.
	type group struct{ a0, a1, b0, b1 int }
	next := func(i, j int) (group, bool) {
		for i < na && j < nb && !del[i] && !ins[j] {
			i, j = i+1, j+1
		}
		if i == na && j == nb {
			return group{}, false
		}
		g := group{a0: i, b0: j}
		for i < na && del[i] {
			i++
		}
		for j < nb && ins[j] {
			j++
		}
		g.a1, g.b1 = i, j
		return g, true
	}
	g, ok := next(0, 0)
	for ok {
		first, last := g, g
		for {
			if g, ok = next(last.a1, last.b1); !ok || g.a0-last.a1 > 2*patchContext {
				break // g, if ok, starts the next hunk
			}
			last = g
		}
		aStart := max(0, first.a0-patchContext)
		bStart := first.b0 - (first.a0 - aStart)
		aEnd := min(na, last.a1+patchContext)
		bEnd := last.b1 + (aEnd - last.a1)
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aEnd-aStart), hunkRange(bStart, bEnd-bStart))
		for x, y := aStart, bStart; x < aEnd || y < bEnd; {
			switch {
			case x < aEnd && del[x]:
				hunkLine(w, '-', a.line(x))
				x++
			case y < bEnd && ins[y]:
				hunkLine(w, '+', b.line(y))
				y++
			default:
				hunkLine(w, ' ', a.line(x))
				x, y = x+1, y+1
			}
		}
	}
}

// hunkRange is one side of a hunk header: the first line (1-based; for
// an empty range, the line before it) and the count, omitted when 1.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func hunkLine(w *bufio.Writer, op byte, line []byte) {
	w.WriteByte(op)
	w.Write(line)
	if len(line) == 0 || line[len(line)-1] != '\n' {
		w.WriteString("\n\\ No newline at end of file\n")
	}
}
