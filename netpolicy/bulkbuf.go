package netpolicy

import (
	"sync"
	"time"
)

// bulkBuffers caches the tunnels' large buffers for the whole process.
//
// A large buffer is taken by a tunnel direction that is moving bulk data
// (see pump). Where the platform allows it, it is an anonymous mapping of
// its own, aligned to and advised for transparent huge pages (see
// mapBulk), and it is kept once the kernel has faulted it in. The buffers
// used to come from a sync.Pool, which the garbage collector empties: on
// this project's development VM (where a page fault is expensive) each
// 256 MiB tunnelled download then faulted in some 1,800 fresh 4 KiB pages
// of its buffer, about a tenth of the proxy's CPU samples, and a
// download's page faults fell by that much with this cache.
//
// The cache keeps at most keepMax buffers, and a buffer that nobody has
// taken for keepFor is returned to the kernel, so an idle process holds
// none of this memory for long.
type bulkBuffers struct {
	keepMax int
	keepFor time.Duration

	mu    sync.Mutex
	free  []bulkBuf // most recently returned last
	sweep *time.Timer
}

// A bulkBuf is one large buffer.
type bulkBuf struct {
	b      []byte
	mapped bool      // b is a mapping of its own (mapBulk), not Go heap
	used   time.Time // when it was last returned to the cache
}

// bulkCache is the process's cache: as many buffers as one proxy may use
// at once, each kept for 5 s.
var bulkCache = bulkBuffers{keepMax: largeBudget, keepFor: 5 * time.Second}

// get returns a buffer of largeBuf bytes, reusing the most recently
// returned one (whose pages are the most likely to be resident).
func (c *bulkBuffers) get() bulkBuf {
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free[n-1] = bulkBuf{}
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return b
	}
	c.mu.Unlock()
	if b, err := mapBulk(largeBuf); err == nil {
		return bulkBuf{b: b, mapped: true}
	}
	return bulkBuf{b: make([]byte, largeBuf)}
}

// put returns b to the cache, or to the kernel when the cache is full.
func (c *bulkBuffers) put(b bulkBuf) {
	c.mu.Lock()
	if len(c.free) >= c.keepMax {
		c.mu.Unlock()
		b.release()
		return
	}
	b.used = time.Now()
	c.free = append(c.free, b)
	if c.sweep == nil {
		c.sweep = time.AfterFunc(c.keepFor, c.expire)
	}
	c.mu.Unlock()
}

// expire unmaps the buffers returned more than keepFor ago and sets the
// next sweep for the rest.
func (c *bulkBuffers) expire() {
	now := time.Now()
	var old []bulkBuf
	c.mu.Lock()
	keep := c.free[:0]
	for _, f := range c.free {
		if now.Sub(f.used) >= c.keepFor {
			old = append(old, f)
		} else {
			keep = append(keep, f)
		}
	}
	clear(c.free[len(keep):])
	c.free = keep
	c.sweep = nil
	if len(keep) > 0 {
		c.sweep = time.AfterFunc(c.keepFor-now.Sub(keep[0].used), c.expire)
	}
	c.mu.Unlock()
	for _, b := range old {
		b.release()
	}
}

// release gives a mapped buffer back to the kernel; a heap buffer is left
// to the garbage collector.
func (b bulkBuf) release() {
	if b.mapped {
		unmapBulk(b.b)
	}
}
