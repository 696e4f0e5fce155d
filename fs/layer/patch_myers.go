package layer

import (
	"bytes"
	"hash/maphash"
)

// The line diff behind WritePatch's text hunks: Myers' O(ND) algorithm in
// its linear-space form (the "middle snake" bisection), on lines mapped
// to integer ids. Memory is the two texts, 4 bytes per line for line
// starts and 4 for ids, 1 per line for the result, the id table (at most
// 16 bytes per line, freed before the diff runs), and two diagonal arrays
// bounded by the cost limit — never the N*D trace.
//
// Two bounds keep adversarial files from costing quadratic time, both
// counted in steps, never in wall time, so the patch is the same on any
// machine. A bisection that reaches costLimit edits without meeting
// splits at its furthest forward point instead (GNU diff's and xdiff's
// "too expensive" heuristic): the diff stays valid, maybe not minimal.
// And once the whole diff has spent its budget of steps, each remaining
// region is written as all its old lines deleted and all its new lines
// added. Either way the hunks apply and produce exactly the new file.

// lines are a text's line starts: line i is data[starts[i]:starts[i+1]],
// its newline included (the last may have none).
type lines struct {
	data   []byte
	starts []uint32
}

func splitLines(data []byte) lines {
	l := lines{data: data, starts: make([]uint32, 0, bytes.Count(data, []byte{'\n'})+2)}
	for off := 0; off < len(data); {
		l.starts = append(l.starts, uint32(off))
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			off = len(data)
		} else {
			off += i + 1
		}
	}
	l.starts = append(l.starts, uint32(len(data)))
	return l
}

func (l lines) n() int            { return len(l.starts) - 1 }
func (l lines) line(i int) []byte { return l.data[l.starts[i]:l.starts[i+1]] }

// lineIDs numbers the lines of two texts so that equal lines get equal
// ids. The table is open addressing, sized once for the lines to number
// (at most 3/4 full): a slot holds id+1; each id keeps its line's hash
// and a reference to its first line (text in the top bit, line number
// below) for the byte comparison that settles a collision. That is 16
// bytes per line at most, allocated up front, never regrown.
type lineIDs struct {
	seed   maphash.Seed
	texts  [2]*lines
	slots  []uint32
	hashes []uint32
	owner  []uint32
}

func newLineIDs(a, b *lines, count int) *lineIDs {
	size := 64
	for size*3 < count*4 {
		size *= 2
	}
	return &lineIDs{seed: maphash.MakeSeed(), texts: [2]*lines{a, b}, slots: make([]uint32, size),
		hashes: make([]uint32, 0, count), owner: make([]uint32, 0, count)}
}

// id is the id of line i of text which (0 or 1). At most count lines may
// be numbered.
func (t *lineIDs) id(which, i int) uint32 {
	b := t.texts[which].line(i)
	h := uint32(maphash.Bytes(t.seed, b))
	mask := uint32(len(t.slots) - 1)
	for s := h & mask; ; s = (s + 1) & mask {
		v := t.slots[s]
		if v == 0 {
			id := uint32(len(t.owner))
			t.owner = append(t.owner, uint32(which)<<31|uint32(i))
			t.hashes = append(t.hashes, h)
			t.slots[s] = id + 1
			return id
		}
		if id := v - 1; t.hashes[id] == h {
			o := t.owner[id]
			if bytes.Equal(t.texts[o>>31].line(int(o&(1<<31-1))), b) {
				return id
			}
		}
	}
}

// lineDiff compares two line sequences and marks, in del and ins, the
// lines of a deleted and the lines of b inserted; unmarked lines match in
// order.
type lineDiff struct {
	a, b      []uint32
	del, ins  []bool
	fwd, bwd  []int
	costLimit int
	budget    int
}

// diffLines marks in del (len(a)) the lines of a deleted and in ins
// (len(b)) the lines of b inserted. budget is the number of steps it may
// spend (see above); it returns the number spent, which exceeds budget
// by at most one diagonal's snake and one round: len(a)+2*costLimit+1.
func diffLines(a, b []uint32, del, ins []bool, budget int) int {
	limit := 256
	for limit*limit < len(a)+len(b) {
		limit *= 2
	}
	d := &lineDiff{a: a, b: b, del: del, ins: ins,
		fwd: make([]int, 2*limit+2), bwd: make([]int, 2*limit+2), costLimit: limit, budget: budget}
	d.compare(0, len(a), 0, len(b))
	return budget - d.budget
}

func (d *lineDiff) replace(aLo, aHi, bLo, bHi int) {
	for i := aLo; i < aHi; i++ {
		d.del[i] = true
	}
	for j := bLo; j < bHi; j++ {
		d.ins[j] = true
	}
}

func (d *lineDiff) compare(aLo, aHi, bLo, bHi int) {
	for aLo < aHi && bLo < bHi && d.a[aLo] == d.b[bLo] {
		aLo, bLo = aLo+1, bLo+1
	}
	for aLo < aHi && bLo < bHi && d.a[aHi-1] == d.b[bHi-1] {
		aHi, bHi = aHi-1, bHi-1
	}
	if aLo == aHi || bLo == bHi || d.budget <= 0 {
		d.replace(aLo, aHi, bLo, bHi)
		return
	}
	x, y := d.split(aLo, aHi, bLo, bHi)
	if x < 0 || (x == aLo && y == bLo) || (x == aHi && y == bHi) {
		d.replace(aLo, aHi, bLo, bHi) // budget spent (or no progress: never expected)
		return
	}
	d.compare(aLo, x, bLo, y)
	d.compare(x, aHi, y, bHi)
}

// split finds where an optimal edit path of a[aLo:aHi] to b[bLo:bHi]
// crosses its middle (the bisection of Myers 1986, section 4b, in the
// form of diff-match-patch's diff_bisect), or past costLimit edits the
// furthest point a forward path reached. It returns -1, -1 when the
// budget runs out.
func (d *lineDiff) split(aLo, aHi, bLo, bHi int) (int, int) {
	n, m := aHi-aLo, bHi-bLo
	maxD := (n + m + 1) / 2
	if maxD > d.costLimit {
		maxD = d.costLimit
	}
	// Only diagonals within maxD of the centre are used this call: reset
	// those; an index outside them holds a value of an earlier call.
	off := d.costLimit
	lo, hi := max(0, off-maxD-1), min(len(d.fwd)-1, off+maxD+1)
	for i := lo; i <= hi; i++ {
		d.fwd[i], d.bwd[i] = -1, -1
	}
	d.fwd[off+1], d.bwd[off+1] = 0, 0
	delta := n - m
	front := delta%2 != 0
	k1start, k1end, k2start, k2end := 0, 0, 0, 0
	bestX, bestY := -1, -1
	for dd := 0; dd < maxD; dd++ {
		if d.budget -= 2*dd + 1; d.budget < 0 {
			return -1, -1
		}
		bestX, bestY = -1, -1
		for k1 := -dd + k1start; k1 <= dd-k1end; k1 += 2 {
			i := off + k1
			var x1 int
			if k1 == -dd || (k1 != dd && d.fwd[i-1] < d.fwd[i+1]) {
				x1 = d.fwd[i+1]
			} else {
				x1 = d.fwd[i-1] + 1
			}
			y1 := x1 - k1
			x0 := x1
			for x1 < n && y1 < m && d.a[aLo+x1] == d.b[bLo+y1] {
				x1, y1 = x1+1, y1+1
			}
			if d.budget -= x1 - x0; d.budget < 0 {
				return -1, -1
			}
			d.fwd[i] = x1
			switch {
			case x1 > n:
				k1end += 2
			case y1 > m:
				k1start += 2
			default:
				if bestX < 0 || x1+y1 > bestX+bestY {
					bestX, bestY = x1, y1
				}
				if front {
					if j := off + delta - k1; j >= lo && j <= hi && d.bwd[j] != -1 && x1 >= n-d.bwd[j] {
						return aLo + x1, bLo + y1
					}
				}
			}
		}
		for k2 := -dd + k2start; k2 <= dd-k2end; k2 += 2 {
			i := off + k2
			var x2 int
			if k2 == -dd || (k2 != dd && d.bwd[i-1] < d.bwd[i+1]) {
				x2 = d.bwd[i+1]
			} else {
				x2 = d.bwd[i-1] + 1
			}
			y2 := x2 - k2
			x0 := x2
			for x2 < n && y2 < m && d.a[aHi-x2-1] == d.b[bHi-y2-1] {
				x2, y2 = x2+1, y2+1
			}
			if d.budget -= x2 - x0; d.budget < 0 {
				return -1, -1
			}
			d.bwd[i] = x2
			switch {
			case x2 > n:
				k2end += 2
			case y2 > m:
				k2start += 2
			case !front:
				if j := off + delta - k2; j >= lo && j <= hi && d.fwd[j] != -1 {
					x1 := d.fwd[j]
					y1 := off + x1 - j
					if x1 >= n-x2 {
						return aLo + x1, bLo + y1
					}
				}
			}
		}
	}
	// Past the cost limit: split where the forward search got furthest.
	// That prefix costs at most costLimit edits, so its own bisection
	// meets; the rest is smaller by at least costLimit lines.
	if bestX < 0 {
		return -1, -1
	}
	return aLo + bestX, bLo + bestY
}
