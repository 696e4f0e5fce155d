package fs

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
	t := newLineIDs()
	ida := make([]uint32, na-pre-suf)
	for i := range ida {
		ida[i] = t.id(&a, pre+i)
	}
	idb := make([]uint32, nb-pre-suf)
	for j := range idb {
		idb[j] = t.id(&b, pre+j)
	}
	t = nil
	del, ins := make([]bool, na), make([]bool, nb)
	diffLines(ida, idb, del[pre:na-suf], ins[pre:nb-suf], diffBudget(len(ida), len(idb)))

	type group struct{ a0, a1, b0, b1 int }
	var groups []group
	for i, j := 0, 0; i < na || j < nb; {
		if (i < na && del[i]) || (j < nb && ins[j]) {
			g := group{a0: i, b0: j}
			for i < na && del[i] {
				i++
			}
			for j < nb && ins[j] {
				j++
			}
			g.a1, g.b1 = i, j
			groups = append(groups, g)
			continue
		}
		i, j = i+1, j+1
	}
	for h := 0; h < len(groups); {
		last := h
		for last+1 < len(groups) && groups[last+1].a0-groups[last].a1 <= 2*patchContext {
			last++
		}
		aStart := max(0, groups[h].a0-patchContext)
		bStart := groups[h].b0 - (groups[h].a0 - aStart)
		aEnd := min(na, groups[last].a1+patchContext)
		bEnd := groups[last].b1 + (aEnd - groups[last].a1)
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aEnd-aStart), hunkRange(bStart, bEnd-bStart))
		i := aStart
		for _, g := range groups[h : last+1] {
			for ; i < g.a0; i++ {
				hunkLine(w, ' ', a.line(i))
			}
			for ; i < g.a1; i++ {
				hunkLine(w, '-', a.line(i))
			}
			for j := g.b0; j < g.b1; j++ {
				hunkLine(w, '+', b.line(j))
			}
		}
		for ; i < aEnd; i++ {
			hunkLine(w, ' ', a.line(i))
		}
		h = last + 1
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
