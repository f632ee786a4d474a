//go:build linux

package raftstore

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/segment"
)

// allocated is the bytes of disk the segment files in dir hold, and their
// total length.
func allocated(t *testing.T, dir string) (alloc, length int64) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	for _, n := range names {
		var st syscall.Stat_t
		if err := syscall.Stat(n, &st); err != nil {
			t.Fatal(err)
		}
		alloc += st.Blocks * 512
		length += st.Size
	}
	return alloc, length
}

func openGrowWAL(t *testing.T, dir string, seg int) *wal.WAL {
	t.Helper()
	w, err := wal.Open(dir, wal.WithSegmentSize(seg), wal.WithSegmentFiler(segment.NewFiler(dir, newGrowFS(nil))))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func appendN(t *testing.T, w *wal.WAL, from uint64, n int, size int) {
	t.Helper()
	logs := make([]*raft.Log, 0, n)
	for i := range n {
		logs = append(logs, &raft.Log{Index: from + uint64(i), Term: 1, Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// An idle group's segment holds about what was written; a busy one grows
// to the full segment; a reopened one keeps growing, and every entry
// reads back.
func TestGrowFS_AllocationFollowsWrites(t *testing.T) {
	dir := t.TempDir()
	const seg = 16 << 20
	w := openGrowWAL(t, dir, seg)
	appendN(t, w, 1, 10, 100)
	alloc, length := allocated(t, dir)
	if length != seg {
		t.Fatalf("segment length %d, want the full %d (checkSegments relies on it)", length, seg)
	}
	if alloc > 2*firstReserve {
		t.Fatalf("a few small entries allocated %d bytes; want at most %d", alloc, 2*firstReserve)
	}

	// 6 MiB more: allocation at least covers the writes, by doubling.
	appendN(t, w, 11, 6, 1<<20)
	alloc, _ = allocated(t, dir)
	if alloc < 6<<20 || alloc > seg {
		t.Fatalf("after 6 MiB of entries %d bytes allocated; want within [6 MiB, %d]", alloc, seg)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened: the tail segment keeps filling, then rolls over.
	w = openGrowWAL(t, dir, seg)
	defer w.Close()
	appendN(t, w, 17, 12, 1<<20)
	appendN(t, w, 29, 1, 100) // raft-wal starts the next segment with the append after the seal
	var l raft.Log
	for _, idx := range []uint64{1, 10, 16, 17, 28, 29} {
		if err := w.GetLog(idx, &l); err != nil || l.Index != idx {
			t.Fatalf("entry %d: %v (got %d)", idx, err, l.Index)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) < 2 {
		t.Fatalf("want a second segment after %d MiB, have %d", 18, len(segs))
	}
	if fi, err := os.Stat(segs[0]); err != nil || fi.Size() < seg {
		t.Fatalf("sealed segment: %v, size %d", err, fi.Size())
	}
}
