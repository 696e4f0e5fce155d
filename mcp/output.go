package mcp

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// headTail keeps the first and last halves of at most max bytes written
// to it and counts the rest: a command's output as a model needs it (the
// start, and the end where errors are), never more than max bytes held.
// It never fails and never blocks the command. Safe for concurrent use.
type headTail struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte // a ring of max-max/2 bytes once full
	start int    // where the ring's oldest byte is
	total int64
}

func newHeadTail(max int) *headTail { return &headTail{max: max} }

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	if room := h.max/2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	tailMax := h.max - h.max/2
	if tailMax <= 0 {
		return n, nil
	}
	if len(p) >= tailMax {
		h.tail = append(h.tail[:0], p[len(p)-tailMax:]...)
		h.start = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(h.tail) < tailMax {
			k := min(tailMax-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(h.tail[h.start:], p)
		p = p[k:]
		h.start = (h.start + k) % tailMax
	}
	return n, nil
}

// Total is how many bytes were written.
func (h *headTail) Total() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// String returns what was kept; when bytes were dropped, a marker in
// their place says how many. Invalid UTF-8 becomes U+FFFD.
func (h *headTail) String() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := append(append([]byte(nil), h.tail[h.start:]...), h.tail[:h.start]...)
	kept := int64(len(h.head) + len(tail))
	if kept == h.total {
		return strings.ToValidUTF8(string(h.head)+string(tail), "\uFFFD"), false
	}
	var b strings.Builder
	b.WriteString(strings.ToValidUTF8(string(h.head), "\uFFFD"))
	b.WriteString("\n[... " + itoa(h.total-kept) + " bytes cut: the output was " + itoa(h.total) + " bytes; redirect it to a file and read parts of it with file_read or file_grep ...]\n")
	// The tail starts mid-character at worst: drop a partial rune.
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	b.WriteString(strings.ToValidUTF8(string(tail), "\uFFFD"))
	return b.String(), true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
