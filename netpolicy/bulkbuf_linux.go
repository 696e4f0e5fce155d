package netpolicy

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a PMD-level transparent huge page with 4 KiB
// base pages (x86-64, and arm64's default).
const hugePage = 2 << 20

// mapBulk maps n bytes (a multiple of hugePage) of anonymous memory,
// aligned to hugePage and advised MADV_HUGEPAGE, so that the kernel can
// back it with a few huge pages instead of thousands of small ones: hosts
// whose transparent_hugepage setting is "madvise" (Debian's default) give
// huge pages only to advised ranges. Where huge pages are off, the
// mapping works all the same with small pages.
func mapBulk(n int) ([]byte, error) {
	size := uintptr(n) + hugePage
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	// Keep the aligned n bytes; unmap the head before the first boundary
	// and the tail after n.
	skip := (hugePage - uintptr(p)%hugePage) % hugePage
	if skip > 0 {
		_ = unix.MunmapPtr(p, skip)
	}
	if tail := size - skip - uintptr(n); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, skip+uintptr(n)), tail)
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, skip)), n)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // best effort: THP may be off
	return b, nil
}

// unmapBulk releases a buffer from mapBulk.
func unmapBulk(b []byte) {
	_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}
