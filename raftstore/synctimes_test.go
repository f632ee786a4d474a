package raftstore

import (
	"testing"
	"time"

	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/segment"
)

// Every append's fsync of a segment lands in the histogram, in the right
// bucket, and the cumulative counts only grow.
func TestSyncTimesCountSegmentFsyncs(t *testing.T) {
	var st SyncTimes
	dir := t.TempDir()
	w, err := wal.Open(dir, wal.WithSegmentSize(1<<20), wal.WithSegmentFiler(segment.NewFiler(dir, newGrowFS(&st))))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	before := st.Stats(LogStoreWAL).Count
	appendN(t, w, 1, 1, 10)
	appendN(t, w, 2, 1, 10)
	got := st.Stats(LogStoreWAL)
	if got.Count < before+2 || got.Sum <= 0 {
		t.Fatalf("after two appends: %d fsyncs (%d before), %v s; want at least 2 more", got.Count, before, got.Sum)
	}
	if last := got.Cumulative[len(got.Cumulative)-1]; last > got.Count {
		t.Fatalf("cumulative %v above the count %d", got.Cumulative, got.Count)
	}

	var h SyncTimes
	h.Observe(30 * time.Microsecond) // first bucket (50 µs)
	h.Observe(3 * time.Millisecond)  // the 5 ms bucket
	h.Observe(time.Minute)           // above every bucket: +Inf only
	s := h.Stats("x")
	if s.Count != 3 || s.Cumulative[0] != 1 || s.Cumulative[6] != 2 || s.Cumulative[len(SyncBuckets)-1] != 2 {
		t.Fatalf("stats %+v", s)
	}
	var none *SyncTimes
	none.Observe(time.Second) // a replica without a Node: no panic, nothing kept
}
