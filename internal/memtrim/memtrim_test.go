package memtrim

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

const smaps = `00400000-00401000 r--p 00000000 fd:01 123 /usr/bin/tent
Rss:                   4 kB
Anonymous:             0 kB
00401000-00a00000 r-xp 00001000 fd:01 123 /usr/bin/tent
Rss:                5000 kB
Anonymous:             0 kB
00a00000-00b00000 r--p 00600000 fd:01 123 /usr/bin/tent
Rss:                 900 kB
Anonymous:            12 kB
00b00000-00b10000 rw-p 00700000 fd:01 123 /usr/bin/tent
Rss:                  64 kB
Anonymous:            64 kB
00c00000-00c10000 r--p 00000000 00:00 0 [vvar]
Rss:                   8 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
7f0000200000-7f0000300000 r--s 00000000 00:05 77 /memfd:x (deleted)
Rss:                1024 kB
Anonymous:             0 kB
7f0000400000-7f0000500000 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                   0 kB
Anonymous:             0 kB
`

// Only clean, private, read-only, resident file mappings are dropped:
// not a RELRO mapping holding relocated (anonymous) pages, not writable
// data, not [vvar], not anonymous memory, not shared mappings, not
// mappings with nothing resident.
func TestCleanFileMappings(t *testing.T) {
	got := cleanFileMappings(strings.NewReader(smaps))
	if len(got) != 2 || got[0].start != 0x400000 || got[1].start != 0x401000 || got[1].end != 0xa00000 || got[1].rss != 5000<<10 {
		t.Fatalf("got %+v", got)
	}
}

// Trim really lowers this process's resident file pages, and the process
// keeps working (its code faults back in).
func TestTrimLowersRssFile(t *testing.T) {
	before := rssFile(t)
	dropped, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	if dropped == 0 || after >= before {
		t.Fatalf("RssFile %d kB -> %d kB (dropped %d bytes)", before, after, dropped)
	}
	if strconv.Itoa(42) != "42" {
		t.Fatal("the process no longer works")
	}
}

func rssFile(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatal("no RssFile")
	return 0
}
