package fsm

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the x86-64 and arm64 transparent huge page size.
const hugePage = 2 << 20

// dedupMmapBytes is the smallest table mapped outside the Go heap: below a
// few huge pages the TLB gain is nil and a Go slice is simpler.
const dedupMmapBytes = 4 << 20

// offHeap is a table's mapping outside the Go heap.
type offHeap struct {
	mem     []byte
	cleanup runtime.Cleanup
}

// allocDedupSlots returns n zeroed slots and, for a mapped table, what frees
// them. Large tables are an anonymous private mapping aligned to a huge
// page and advised MADV_HUGEPAGE before first touch, so the kernel backs
// them with 2 MB pages on a host whose THP setting is `madvise` (most
// distributions' default). The Go runtime never sees this memory: it is
// neither scanned (the slots hold no pointers) nor counted toward GOGC's
// heap goal. The index releases it; a cleanup releases a table the index
// never did (a state dropped by a failed restore).
func allocDedupSlots(n int) ([]dedupSlot, *offHeap) {
	size := n * int(unsafe.Sizeof(dedupSlot{}))
	if size < dedupMmapBytes {
		return make([]dedupSlot, n), nil
	}
	// A huge page more than needed, trimmed at both ends to alignment:
	// anonymous mappings are only page-aligned, and a huge page must sit
	// on a 2 MB boundary. The Ptr calls, not unix.Mmap: that one registers
	// the mapping under its full range and refuses to unmap part of it.
	raw, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		// Let the Go heap try; if it cannot either, it fails the usual way.
		return make([]dedupSlot, n), nil
	}
	skip := (hugePage - uintptr(raw)%hugePage) % hugePage
	if skip > 0 {
		munmap(raw, skip)
	}
	munmap(unsafe.Add(raw, skip+uintptr(size)), hugePage-skip) // never empty: skip < hugePage
	mem := unsafe.Slice((*byte)(unsafe.Add(raw, skip)), size)
	// Best effort: with THP `never`, or a kernel without it, the table
	// still works on small pages.
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	m := &offHeap{mem: mem}
	m.cleanup = runtime.AddCleanup(m, unmapBytes, mem)
	return unsafe.Slice((*dedupSlot)(unsafe.Pointer(unsafe.SliceData(mem))), n), m
}

func (m *offHeap) release() {
	if m == nil {
		return
	}
	m.cleanup.Stop()
	unmapBytes(m.mem)
	m.mem = nil
}

// munmap cannot fail on a range this file mapped; if it did, leaking the
// range would be all it cost.
func munmap(p unsafe.Pointer, size uintptr) { _ = unix.MunmapPtr(p, size) }

func unmapBytes(b []byte) { munmap(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))) }
