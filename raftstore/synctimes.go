package raftstore

import (
	"sync"
	"time"
)

// SyncBuckets are the upper bounds, in seconds, of the fsync latency
// histogram (raftq_disk_sync_seconds): an SSD's fdatasync takes tens of
// microseconds to a few milliseconds, a busy or failing disk's hundreds.
var SyncBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// SyncTimes is a histogram of fsync latencies of one kind of store, summed
// over the node's raft groups. An fsync costs far more than its mutex.
type SyncTimes struct {
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	n      uint64
	sum    float64
}

// Observe records one fsync. A nil SyncTimes records nothing (a replica
// opened without a Node, in tests).
func (s *SyncTimes) Observe(d time.Duration) {
	if s == nil {
		return
	}
	sec := d.Seconds()
	i := 0
	for i < len(SyncBuckets) && sec > SyncBuckets[i] {
		i++
	}
	s.mu.Lock()
	if s.counts == nil {
		s.counts = make([]uint64, len(SyncBuckets)+1)
	}
	s.counts[i]++
	s.n++
	s.sum += sec
	s.mu.Unlock()
}

// SyncStats is a copy of a SyncTimes.
type SyncStats struct {
	Store string
	Count uint64
	Sum   float64 // seconds
	// Cumulative is the count at or below each of SyncBuckets, as
	// Prometheus histograms count.
	Cumulative []uint64
}

// Stats copies the histogram.
func (s *SyncTimes) Stats(store string) SyncStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := SyncStats{Store: store, Count: s.n, Sum: s.sum, Cumulative: make([]uint64, len(SyncBuckets))}
	var cum uint64
	for i := range SyncBuckets {
		if s.counts != nil {
			cum += s.counts[i]
		}
		out.Cumulative[i] = cum
	}
	return out
}

// SyncStats reports the fsync latencies of the node's raft log segments
// (store "wal"). raft.db's fsyncs happen inside bbolt's commit, which
// offers no hook; its commit time, fsyncs included, is raft-boltdb's
// storeLogs timing (raftq_raft_internal_boltdb_storeLogs, docs/metrics.md).
func (n *Node) SyncStats() []SyncStats {
	return []SyncStats{n.walSyncs.Stats(LogStoreWAL)}
}
