package sandbox

import (
	"slices"
	"sync"
)

// outRing keeps the last max bytes written to it, and how many were
// written in all. Readers read by offset and consume nothing: by
// offset alone (readAt), never holding a writer back, or following
// (attachAt), and then, while any follower is attached, a write that
// does not fit waits for the slowest to read, as on a pipe.
type outRing struct {
	mu      sync.Mutex
	buf     []byte
	total   int64 // bytes ever written; buf holds the last len(buf)
	seen    int64 // the furthest any follower got
	max     int
	changed chan struct{} // closed (and replaced) at each write, read and at close
	readers map[*ringReader]struct{}
	closed  bool
}

// ringReader is one follower's position.
type ringReader struct {
	off int64
}

func newOutRing(max int) *outRing {
	return &outRing{max: max, changed: make(chan struct{}), readers: map[*ringReader]struct{}{}}
}

// notify wakes every wait; r.mu is held.
func (r *outRing) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// slowest is the lowest offset of an attached reader; r.mu is held.
func (r *outRing) slowest() (int64, bool) {
	low, any := int64(0), false
	for rd := range r.readers {
		if !any || rd.off < low {
			low, any = rd.off, true
		}
	}
	return low, any
}

// Write keeps p's tail within the bound. With a reader attached it waits
// until the readers have read enough for each piece of p (at most the
// bound) to fit; with none it never waits, and drops the oldest bytes.
func (r *outRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	for {
		piece := p[:min(len(p), r.max)]
		for {
			low, attached := r.slowest()
			if !attached || r.closed || r.total-low+int64(len(piece)) <= int64(r.max) {
				break
			}
			ch := r.changed
			r.mu.Unlock()
			<-ch
			r.mu.Lock()
		}
		if _, attached := r.slowest(); !attached && len(p) > r.max {
			// Nobody follows: only the tail is kept.
			r.total += int64(len(p) - r.max)
			p = p[len(p)-r.max:]
			piece = p
		}
		if over := len(r.buf) + len(piece) - r.max; over > 0 {
			r.buf = append(r.buf[:0], r.buf[over:]...)
		}
		r.buf = append(r.buf, piece...)
		r.total += int64(len(piece))
		r.notify()
		p = p[len(piece):]
		if len(p) == 0 {
			return n, nil
		}
	}
}

// close marks the end of the output.
func (r *outRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.notify()
	}
}

// attachAt adds a follower at offset off (see ringReader), or at the
// oldest kept byte when the bytes from off were dropped; it returns the
// follower and where it starts. An offset past what was written is
// refused (false).
func (r *outRing) attachAt(off int64) (*ringReader, int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off < 0 || off > r.total {
		return nil, 0, false
	}
	rd := &ringReader{off: max(off, r.total-int64(len(r.buf)))}
	r.readers[rd] = struct{}{}
	return rd, rd.off, true
}

// detach removes a reader; writes waiting for it go on.
func (r *outRing) detach(rd *ringReader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.readers, rd)
	r.notify()
}

// next returns at most n bytes that rd has not read and that are still
// kept (a copy), a channel closed at the next change, and whether the
// output has ended.
func (r *outRing) next(rd *ringReader, n int) (data []byte, changed <-chan struct{}, closed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	rd.off = max(rd.off, first)
	data = r.buf[rd.off-first:]
	return slices.Clone(data[:min(len(data), n)]), r.changed, r.closed
}

// advance records that rd has read n more bytes.
func (r *outRing) advance(rd *ringReader, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd.off += int64(n)
	r.seen = max(r.seen, rd.off)
	r.notify()
}

// readAt returns at most n kept bytes from offset off (a copy) without
// consuming them, with where they start (later than off by what was
// dropped), a channel closed at the next change, and whether the output
// has ended.
func (r *outRing) readAt(off int64, n int) (out Output, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.total - int64(len(r.buf))
	off = min(max(off, 0), r.total)
	out.Offset = off
	if off < first {
		out.Dropped, out.Offset = first-off, first
	}
	data := r.buf[out.Offset-first:]
	if len(data) > n {
		data = data[:n]
	}
	out.Data = slices.Clone(data)
	out.End = r.closed && out.Offset+int64(len(data)) == r.total
	return out, r.changed
}

// written returns how many bytes were written in all.
func (r *outRing) written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// seenAt is the furthest offset any follower got to: where the output
// no reader took yet starts.
func (r *outRing) seenAt() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// stats returns how many bytes no follower took yet (the next tent
// attach gets them), and how many were dropped before any took them.
func (r *outRing) stats() (unread, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := r.seen
	if first := r.total - int64(len(r.buf)); off < first {
		dropped = first - off
		off = first
	}
	return r.total - off, dropped
}
