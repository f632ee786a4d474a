package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/raftstore"
)

// DiskSyncs reports the fsync latencies of the node's raft stores;
// *cluster.Node implements it.
type DiskSyncs interface {
	DiskSyncStats() []raftstore.SyncStats
}

var descDiskSync = prometheus.NewDesc("raftq_disk_sync_seconds",
	"Latency of the fsyncs of the node's raft stores, by store (wal: raft log segments, over every raft group of the node).",
	[]string{"store"}, nil)

type diskSyncCollector struct{ d DiskSyncs }

func (c diskSyncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDiskSync }

func (c diskSyncCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.d.DiskSyncStats() {
		buckets := make(map[float64]uint64, len(raftstore.SyncBuckets))
		for i, le := range raftstore.SyncBuckets {
			buckets[le] = s.Cumulative[i]
		}
		ch <- prometheus.MustNewConstHistogram(descDiskSync, s.Count, s.Sum, buckets, s.Store)
	}
}
