//go:build !linux

package fsm

// offHeap is empty off Linux: tables are plain Go slices there (the
// huge-page advice in dedupmem_linux.go is Linux's).
type offHeap struct{}

func allocDedupSlots(n int) ([]dedupSlot, *offHeap) { return make([]dedupSlot, n), nil }

func (*offHeap) release() {}
