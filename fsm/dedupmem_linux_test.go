package fsm

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// vmaFlags returns the VmFlags line of the mapping that starts at addr, or
// "" when no mapping starts there.
func vmaFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	prefix := fmt.Sprintf("%x-", addr)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "-") && !strings.Contains(line, ":") || strings.HasPrefix(line, prefix) {
			in = strings.HasPrefix(line, prefix)
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ""
}

func TestLargeDedupTablesAreMappedForHugePages(t *testing.T) {
	small, mem := allocDedupSlots(1024)
	if mem != nil || len(small) != 1024 {
		t.Fatalf("a 32 KB table was mapped (%v) or has %d slots", mem != nil, len(small))
	}
	n := dedupMmapBytes / int(unsafe.Sizeof(dedupSlot{}))
	slots, mem := allocDedupSlots(n)
	if mem == nil {
		t.Fatal("a 4 MB table was not mapped off the heap")
	}
	addr := uintptr(unsafe.Pointer(&slots[0]))
	if addr%hugePage != 0 {
		t.Fatalf("table at %#x is not on a 2 MB boundary", addr)
	}
	slots[0].id, slots[n-1].id = 1, 2 // the whole range is writable
	flags := vmaFlags(t, addr)
	if flags == "" {
		t.Fatalf("no mapping starts at %#x", addr)
	}
	// "hg" is MADV_HUGEPAGE in smaps' VmFlags.
	if !strings.Contains(flags, " hg") {
		t.Fatalf("mapping at %#x not advised for huge pages: %s", addr, flags)
	}
	mem.release()
	if flags := vmaFlags(t, addr); flags != "" {
		t.Fatalf("mapping at %#x still there after release: %s", addr, flags)
	}
}
