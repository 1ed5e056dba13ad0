package log

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// allocSlots returns a zeroed table of n slots and the function that frees
// it. A table of megabytes is mapped outside the Go heap, with huge pages
// asked for: the map's every probe is a random access, which with 4 KiB
// pages misses the TLB as often as the cache, and a fresh heap table
// takes a page fault every 4 KiB as it is first touched (most of the time
// of growing the table, measured). The table holds no pointers, so the
// garbage collector need not see it.
func allocSlots(n int) ([]keySlot, func()) {
	size := n * keySlotBytes
	if size < hugePageBytes {
		return make([]keySlot, n), func() {}
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]keySlot, n), func() {}
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // advice only: without it, 4 KiB pages
	return unsafe.Slice((*keySlot)(unsafe.Pointer(unsafe.SliceData(b))), n), func() { _ = unix.Munmap(b) }
}

// hugePageBytes is the size of a transparent huge page on x86-64 and of
// the smallest on arm64 with 4 KiB pages.
const hugePageBytes = 2 << 20
