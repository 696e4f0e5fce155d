// Package memtrim gives an idle tent process's resident memory back to
// the kernel: its heap's free pages, and its private references to the
// executable's clean code and read-only data pages.
//
// Every sandbox has its own init (and, under the CLI, its own
// supervisor), each a copy of the tent binary. The pages of that binary
// live once in the page cache, shared by all of them, but each process
// that touched a page maps it and counts it in its resident set: an idle
// init showed 11.7 MiB RSS of which 1.1 MiB was its own (anonymous)
// memory. Dropping those mappings from an idle process (MADV_DONTNEED on
// file-backed mappings that are not writable and hold no private copy of
// any page) costs nothing while it stays idle and, when it wakes, one
// minor fault per page it touches again: the pages are still in the
// page cache.
package memtrim

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	_ "unsafe" // go:linkname

	"golang.org/x/sys/unix"
)

// Trim returns the calling process's free heap to the kernel and drops
// its mappings of clean, read-only file pages. It returns how many bytes
// of mappings it dropped.
func Trim() (int64, error) {
	freeOSMemory()
	// Streamed through a small buffer: reading the whole file (some 100
	// KiB) would leave that much garbage resident until the next GC.
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	maps := cleanFileMappings(f)
	f.Close()
	var dropped int64
	for _, m := range maps {
		// Raw madvise: the range is not Go memory.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno == 0 {
			dropped += m.rss
		}
	}
	return dropped, nil
}

type mapping struct {
	start, end uintptr
	rss        int64 // bytes resident
}

// cleanFileMappings parses smaps and returns the mappings that are safe
// to drop: backed by a file (a path, not [heap], [stack], [vdso] ...),
// not writable, and with no anonymous (copied-on-write) page — a
// read-only mapping can hold such pages after relocation (RELRO), and
// dropping them would revert the relocations.
func cleanFileMappings(smaps io.Reader) []mapping {
	var out []mapping
	var cur *mapping
	var ok bool
	anon := int64(0)
	flush := func() {
		if cur != nil && ok && anon == 0 && cur.rss > 0 {
			out = append(out, *cur)
		}
		cur, ok, anon = nil, false, 0
	}
	sc := bufio.NewScanner(smaps)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if start, end, isHeader := parseRange(f[0]); isHeader && len(f) >= 5 {
			flush()
			cur = &mapping{start: start, end: end}
			perms := f[1]
			path := ""
			if len(f) >= 6 {
				path = f[5]
			}
			ok = len(perms) == 4 && perms[1] != 'w' && perms[3] == 'p' && strings.HasPrefix(path, "/") && f[4] != "0"
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			cur.rss = n << 10
		case "Anonymous:":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			anon = n
		}
	}
	flush()
	return out
}

// parseRange parses "start-end" (hex) of an smaps header line.
func parseRange(s string) (uintptr, uintptr, bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseUint(a, 16, 64)
	end, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return 0, 0, false
	}
	return uintptr(start), uintptr(end), true
}

// freeOSMemory is runtime/debug.FreeOSMemory (a garbage collection, then
// every free page returned to the kernel), reached through the name the
// runtime itself gives it for package runtime/debug. Importing
// runtime/debug would delay every sandbox init: the init starts from
// package namespaces' initialiser, and the linker orders initialisers by
// import path among the packages whose imports are done, so a dependency
// that sorts as late as runtime/debug holds namespaces back behind
// regexp's and YAML's (cmd/tent's TestInitStartsEarly).
//
//go:linkname freeOSMemory runtime/debug.freeOSMemory
func freeOSMemory()
