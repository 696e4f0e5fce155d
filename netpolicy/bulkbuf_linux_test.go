package netpolicy

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// mapping returns the /proc/self/smaps block of the mapping that starts
// at addr, or "" if there is none.
func mapping(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := fmt.Sprintf("%x-", addr)
	var block strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			if in {
				break
			}
			in = strings.HasPrefix(line, prefix)
		}
		if in {
			block.WriteString(line + "\n")
		}
	}
	return block.String()
}

// cached reports how many buffers c holds.
func (c *bulkBuffers) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.free)
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestBulkBuffersMapping: a bulk buffer is a mapping of its own, aligned
// to and advised for huge pages (so that touching it faults in 2 MiB at
// a time where THP is on), and releasing it unmaps it.
func TestBulkBuffersMapping(t *testing.T) {
	c := bulkBuffers{keepMax: 1, keepFor: time.Hour}
	b := c.get()
	if !b.mapped || len(b.b) != largeBuf {
		t.Fatalf("get: mapped %v, %d bytes; want a mapping of %d", b.mapped, len(b.b), largeBuf)
	}
	addr := addrOf(b.b)
	if addr%hugePage != 0 {
		t.Fatalf("buffer at %#x: not aligned to 2 MiB", addr)
	}
	for i := 0; i < len(b.b); i += 4096 {
		b.b[i] = 1
	}
	smaps := strings.Join(strings.Fields(mapping(t, addr)), " ")
	if !strings.Contains(smaps, fmt.Sprintf(" Size: %d kB", largeBuf>>10)) {
		t.Fatalf("the buffer's mapping is not exactly %d bytes: %s", largeBuf, smaps)
	}
	if !strings.Contains(smaps, " hg") {
		t.Errorf("the buffer's mapping is not advised MADV_HUGEPAGE (no hg flag): %s", smaps)
	}
	if strings.Contains(smaps, "AnonHugePages: 0 kB") {
		// Not an error: THP may be off, or memory too fragmented.
		t.Logf("no huge page backs the buffer: %s", smaps)
	}

	// The cache keeps one buffer; a second put unmaps at once.
	other := c.get()
	if addrOf(other.b) == addr {
		t.Fatal("get returned a buffer that is in use")
	}
	c.put(b)
	c.put(other)
	if n := c.cached(); n != 1 {
		t.Fatalf("the cache holds %d buffers, want 1", n)
	}
	if m := mapping(t, addrOf(other.b)); m != "" {
		t.Fatalf("the buffer put into a full cache is still mapped:\n%s", m)
	}
	if again := c.get(); addrOf(again.b) != addr {
		t.Fatalf("get did not reuse the cached buffer")
	} else {
		c.put(again)
	}
}

// TestBulkBuffersExpire: buffers nobody takes are unmapped after keepFor,
// and only those.
func TestBulkBuffersExpire(t *testing.T) {
	c := bulkBuffers{keepMax: 4, keepFor: 200 * time.Millisecond}
	a, b := c.get(), c.get()
	c.put(a)
	time.Sleep(250 * time.Millisecond) // a is old now (the sweep may have run)
	c.put(b)
	c.expire()
	if n := c.cached(); n != 1 {
		t.Fatalf("after a expired the cache holds %d buffers, want 1 (b)", n)
	}
	if m := mapping(t, addrOf(a.b)); m != "" {
		t.Fatalf("an expired buffer is still mapped:\n%s", m)
	}
	if m := mapping(t, addrOf(b.b)); m == "" {
		t.Fatal("a buffer that has not expired was unmapped")
	}
	for deadline := time.Now().Add(5 * time.Second); c.cached() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := c.cached(); n != 0 {
		t.Fatalf("the sweep left %d buffers", n)
	}
	if m := mapping(t, addrOf(b.b)); m != "" {
		t.Fatalf("an expired buffer is still mapped:\n%s", m)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sweep != nil {
		t.Fatal("an empty cache still has a sweep timer set")
	}
}
